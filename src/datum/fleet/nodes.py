"""Node classification: ``nodes.yaml``, ordered rules that give a host its manifests and template ``vars``.

```yaml
nodes:
  - match: {name: "web*"}                       # a glob on the host name
    manifests: [common.yaml, web.yaml]
    vars: {port: 8080}
    group: web                                  # its reboot budget's group ([fleet] reboot_concurrency)
  - match: {facts: {os_release.ID: debian}}     # dotted paths into the agent's facts; values globbed
    manifests: [debian.yaml]
  - match: {name: db1}                          # one host's name, no glob
    expected: true                              # declared: the ``hosts`` reconciler misses it when silent
reboot_order:                                   # optional: per group, the order its reboot leases go in
  web: [web3, web1, web2]                       # an explicit list (hosts it does not name go after, by name)
  db: name                                      # by host name (naturally: db2 before db10)
```

Every rule whose ``match`` fits contributes, in file order: its manifests
(each once), its ``vars`` and its ``group`` (a later rule's value wins). A
rule with both ``name`` and ``facts`` needs both. A host no rule matches has
no manifest. A rule may give only a ``group`` or ``expected`` (no ``manifests``).
``expected: true`` declares the one host its ``match.name`` names (a name, not
a glob, and no ``facts``): the fleet's inventory (``datum.fleet.inventory``).
``reboot_order`` names groups some rule gives (or ``default``); a group it does
not name grants its reboot leases to whoever asks first (``datum.store.leases``).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datum.core.budget import BY_NAME, DEFAULT_GROUP, Order
from datum.core.findings import FieldError, Problem, invalid

NODES = "nodes.yaml"
ORDER = "reboot_order"
_RULE_KEYS = {"match", "manifests", "vars", "group", "expected"}
_GLOB = frozenset("*?[")
_MATCH_KEYS = {"name", "facts"}


@dataclass(frozen=True)
class Rule:
    index: int
    name: str | None
    facts: dict[str, str]
    manifests: tuple[str, ...]
    vars: dict[str, Any] = field(default_factory=dict)
    group: str | None = None
    expected: bool = False

    def matches(self, host: str, facts: dict[str, Any]) -> bool:
        if self.name is not None and not fnmatch.fnmatchcase(host, self.name):
            return False
        return all(_fits(_fact(facts, path), want) for path, want in self.facts.items())


def _fact(facts: dict[str, Any], path: str) -> Any:
    value: Any = facts
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _fits(value: Any, want: str) -> bool:
    if value is None or isinstance(value, dict | list):
        return False
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return fnmatch.fnmatchcase(text, want)


def read_list(path: Path, key: str, what: str, also: tuple[str, ...] = ()) -> tuple[list[Any], list[FieldError]]:
    """The list under ``key`` of a fleet YAML file (``nodes.yaml``, an inventory) and the findings so far,
    each at ``NAME: field``; a Problem when the file cannot be read or is not YAML. ``also``: other top-level
    keys the file may have (read with ``read_doc``)."""
    items, found, _doc = read_doc(path, key, what, also)
    return items, found


def read_doc(path: Path, key: str, what: str, also: tuple[str, ...] = ()) -> tuple[list[Any], list[FieldError], Any]:
    """``read_list`` and the whole document, for the keys in ``also``."""
    from datum.host.document import parse

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise Problem.one("INVALID_INPUT", f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    doc, parsed = parse(text, str(path))
    found = [FieldError(f"{path.name}: {f.field}", f.message) for f in parsed]
    items = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(items, list):
        found.append(FieldError(f"{path.name}: {key}", what))
        items = []
    if isinstance(doc, dict):
        found.extend(FieldError(f"{path.name}: {k}", "unknown field") for k in doc if k != key and k not in also)
    return items, found, doc


def load_rules(directory: Path) -> list[Rule]:
    """The rules of ``directory/nodes.yaml``; a Problem with every finding when it is not valid."""
    return load_nodes(directory)[0]


def load_nodes(directory: Path) -> tuple[list[Rule], dict[str, Order]]:
    """The rules of ``directory/nodes.yaml`` and its ``reboot_order`` by group; a Problem with every finding
    (the rules' and the order's) when it is not valid."""
    path = directory / NODES
    items, found, doc = read_doc(path, "nodes", "a list of rules: {match, manifests, vars}", (ORDER,))
    rules: list[Rule] = []
    for i, item in enumerate(items):
        rule = _rule(i, item, directory, found)
        if rule is not None:
            rules.append(rule)
    raw = doc.get(ORDER) if isinstance(doc, dict) else None
    known = {DEFAULT_GROUP, *(r.group for r in rules if r.group is not None)}
    order = _order(raw, known, found) if raw is not None or (isinstance(doc, dict) and ORDER in doc) else {}
    if found:
        raise invalid(found, f"{path} is not valid: {len(found)} finding{'s' if len(found) > 1 else ''}")
    return rules, order


def _order(raw: Any, groups: set[str], found: list[FieldError]) -> dict[str, Order]:
    """``reboot_order``: group -> ``name`` or a list of host names; every finding at its field."""
    here = f"{NODES}: {ORDER}"
    if not isinstance(raw, dict):
        found.append(FieldError(here, "a mapping of group to `name` or a list of host names, e.g. {web: [web3, web1], db: name}"))
        return {}
    out: dict[str, Order] = {}
    for group, value in raw.items():
        at = f"{here}.{group}"
        if not isinstance(group, str) or group not in groups:
            found.append(FieldError(at, f"no rule gives group {group!r} (groups: {', '.join(sorted(groups))})"))
            continue
        if value == BY_NAME:
            out[group] = BY_NAME
            continue
        if not isinstance(value, list) or not value:
            found.append(FieldError(at, "`name` (by host name) or a list of host names, first to reboot first"))
            continue
        seen: set[str] = set()
        bad = len(found)
        for j, host in enumerate(value):
            if not (isinstance(host, str) and host and len(host) <= 253) or _GLOB & set(host):
                found.append(FieldError(f"{at}[{j}]", "a host name, as its agent reports it (no glob)"))
            elif host in seen:
                found.append(FieldError(f"{at}[{j}]", f"{host} is named twice"))
            else:
                seen.add(host)
        if len(found) == bad:
            out[group] = tuple(value)
    return out


def expected_hosts(rules: list[Rule]) -> dict[str, int]:
    """The hosts rules declare (``expected: true``), each with the index of the first rule that does."""
    declared: dict[str, int] = {}
    for rule in rules:
        if rule.expected and rule.name is not None:
            declared.setdefault(rule.name, rule.index)
    return declared


def _rule(i: int, item: Any, directory: Path, found: list[FieldError]) -> Rule | None:
    here = f"{NODES}: nodes[{i}]"
    if not isinstance(item, dict):
        found.append(FieldError(here, "a rule is a mapping: {match, manifests, vars}"))
        return None
    bad = len(found)
    found.extend(FieldError(f"{here}.{k}", "unknown field") for k in item if k not in _RULE_KEYS)
    match = item.get("match")
    if not isinstance(match, dict) or not match:
        found.append(FieldError(f"{here}.match", "required: {name: GLOB} and/or {facts: {PATH: VALUE}}"))
        match = {}
    found.extend(FieldError(f"{here}.match.{k}", "unknown field") for k in match if k not in _MATCH_KEYS)
    name = match.get("name")
    if name is not None and not (isinstance(name, str) and name):
        found.append(FieldError(f"{here}.match.name", "a glob on the host name"))
    facts = match.get("facts") or {}
    if not isinstance(facts, dict) or any(isinstance(v, dict | list) or v is None for v in facts.values()):
        found.append(FieldError(f"{here}.match.facts", "a mapping of fact paths to values (globs)"))
        facts = {}
    group = item.get("group")
    if group is not None and not (isinstance(group, str) and group.strip() and len(group) <= 253):
        found.append(FieldError(f"{here}.group", "a group name (reboot budget), 1 to 253 characters"))
    expected = item.get("expected", False)
    if not isinstance(expected, bool):
        found.append(FieldError(f"{here}.expected", "true or false: whether the host this rule names is declared"))
        expected = False
    elif expected and (not isinstance(name, str) or _GLOB & set(name) or match.get("facts")):
        found.append(FieldError(
            f"{here}.expected",
            "declares one host: match.name must be its name (no * ? [) and the rule match no facts; "
            "declare many hosts in an inventory file ([reconcilers.hosts] inventory)",
        ))
    manifests = item.get("manifests", [] if group is not None or "expected" in item else None)
    if not isinstance(manifests, list) or not (manifests or group or "expected" in item) or not all(isinstance(m, str) and m for m in manifests):
        found.append(FieldError(f"{here}.manifests", "required: a list of manifest paths in the fleet directory"))
        manifests = []
    for j, rel in enumerate(manifests):
        real = (directory / rel).resolve()
        if not real.is_relative_to(directory.resolve()):
            found.append(FieldError(f"{here}.manifests[{j}]", f"{rel} is outside the fleet directory"))
        elif not real.is_file():
            found.append(FieldError(f"{here}.manifests[{j}]", f"no manifest {rel} in the fleet directory"))
    variables = item.get("vars") or {}
    if not isinstance(variables, dict):
        found.append(FieldError(f"{here}.vars", "a mapping of template variables"))
        variables = {}
    if len(found) > bad:
        return None
    flat = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in facts.items()}
    return Rule(i, name, flat, tuple(manifests), dict(variables), group, expected)


def classify(rules: list[Rule], host: str, facts: dict[str, Any]) -> tuple[list[str], dict[str, Any], list[int]]:
    """The manifests (each once, in order), the merged ``vars`` and the indexes of the rules that matched."""
    manifests: list[str] = []
    variables: dict[str, Any] = {}
    matched: list[int] = []
    for rule in rules:
        if rule.matches(host, facts):
            matched.append(rule.index)
            manifests.extend(m for m in rule.manifests if m not in manifests)
            variables.update(rule.vars)
    return manifests, variables, matched


def group_of(rules: list[Rule], host: str, facts: dict[str, Any]) -> str | None:
    """The ``group`` of the last rule that fits the host and gives one; None when none does."""
    found = None
    for rule in rules:
        if rule.group is not None and rule.matches(host, facts):
            found = rule.group
    return found

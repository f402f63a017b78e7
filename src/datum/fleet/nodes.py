"""Node classification: ``nodes.yaml``, ordered rules that give a host its manifests, template ``vars`` and group.

```yaml
labels:                                         # what the server knows of hosts, by name: per name or glob
  "web*": {role: web}
  db1: {role: db, backup: nightly}
nodes:
  - match: {labels: {role: web}}                # the labels above give it; values globbed
    manifests: [common.yaml, web.yaml]
    vars: {port: 8080}
    group: web                                  # its reboot budget's group and rollout waves' ([fleet.rollout])
  - match: {facts: {os_release.ID: debian}}     # dotted paths into the agent's facts: its claims; values globbed
    manifests: [debian.yaml]                    # manifests only, none holding a resource marked sensitive
  - match: {name: db1}                          # one host's name, no glob
    expected: true                              # declared: the ``hosts`` reconciler misses it when silent
reboot_order:                                   # optional: per group, the order its reboot leases go in
  web: [web3, web1, web2]                       # an explicit list (hosts it does not name go after, by name)
  db: name                                      # by host name (naturally: db2 before db10)
```

**Facts are claims.** A host's name is the server's (the name its token is bound to) and so are its labels
(``labels:``, by name, and those given at enrollment: ``datum enroll create --label``, ``datum.fleet.labels``); its facts are what its agent says of itself, so a rule that matches on facts adds
manifests only, and none whose resources are marked ``sensitive``: ``vars``, ``group`` (reboot budget,
rollout waves) and ``expected`` come from name and labels alone. ``nodes.yaml`` refuses a facts rule that
gives more, naming the rule and its line (Puppet's ``trusted`` facts, Kubernetes' node-restriction labels).

Every rule whose ``match`` fits contributes, in file order: its manifests
(each once), its ``vars`` and its ``group`` (a later rule's value wins). A
rule with several of ``name``, ``labels`` and ``facts`` needs all. A host no rule matches has
no manifest. A rule may give only a ``group`` or ``expected`` (no ``manifests``).
``expected: true`` declares the one host its ``match.name`` names (a name, not
a glob, and no ``facts``): the fleet's inventory (``datum.fleet.inventory``).
``reboot_order`` names groups some rule gives (or ``default``); a group it does
not name grants its reboot leases to whoever asks first (``datum.store.leases``).
The document's shape is ``datum.fleet.nodes_model`` (its JSON Schema: ``datum schema --nodes``); what
relates its fields, and them to the fleet directory, is here. Every finding at once, each at its field
with its line.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datum.core.budget import DEFAULT_GROUP, Order
from datum.core.findings import ErrorCode, FieldError, Problem, invalid
from datum.fleet.nodes_model import GLOB, as_text

NODES = "nodes.yaml"
ORDER = "reboot_order"
_GLOB = frozenset(GLOB)
# What a rule on facts may not give: each grants something (secrets in vars, a reboot group, a rollout wave,
# a place in the inventory). ``expected`` has its own finding (it declares one host by name).
GRANTS = ("vars", "group")
FACTS_GIVE_MANIFESTS_ONLY = (
    "a rule that matches on facts (what the host's agent claims) gives manifests only, never {what}: "
    "match it on name or labels (nodes.yaml `labels:`)"
)


@dataclass(frozen=True)
class Rule:
    index: int
    name: str | None
    facts: dict[str, str]
    manifests: tuple[str, ...]
    vars: dict[str, Any] = field(default_factory=dict)
    group: str | None = None
    expected: bool = False
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def on_facts(self) -> bool:
        """Whether the rule matches on what the host claims (it then gives manifests only)."""
        return bool(self.facts)

    def matches(self, host: str, labels: dict[str, str], facts: dict[str, Any]) -> bool:
        if self.name is not None and not fnmatch.fnmatchcase(host, self.name):
            return False
        if not all(_fits(labels.get(key), want) for key, want in self.labels.items()):
            return False
        return all(_fits(_fact(facts, path), want) for path, want in self.facts.items())


@dataclass(frozen=True)
class Rules:
    """``nodes.yaml`` as read: its rules in file order, the labels it gives hosts by name (each pattern
    with its labels, in file order) and its ``reboot_order`` by group. Iterates over the rules."""

    rules: tuple[Rule, ...] = ()
    labels: tuple[tuple[str, dict[str, str]], ...] = ()
    order: dict[str, Order] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def labels_of(self, host: str, enrolled: Mapping[str, str] | None = None) -> dict[str, str]:
        """The labels the server gives ``host``: those it was given at enrollment (``enrolled``: ``datum enroll
        create --label``), then every pattern of ``labels:`` its name fits, a later one's value winning (the
        fleet directory, reviewed where it is kept, has the last word)."""
        given: dict[str, str] = dict(enrolled or {})
        for pattern, labels in self.labels:
            if fnmatch.fnmatchcase(host, pattern):
                given.update(labels)
        return given


def _fact(facts: dict[str, Any], path: str) -> Any:
    value: Any = facts
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _fits(value: Any, want: str) -> bool:
    text = as_text(value)
    return text is not None and fnmatch.fnmatchcase(text, want)


def read_list(path: Path, key: str, what: str) -> tuple[list[Any], list[FieldError]]:
    """The list under ``key`` of a fleet YAML file (an inventory) and the findings so far, each at
    ``NAME: field``; a Problem when the file cannot be read or is not YAML."""
    doc, found, _lines = _read(path)
    items = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(items, list):
        found.append(FieldError(f"{path.name}: {key}", what))
        items = []
    if isinstance(doc, dict):
        found.extend(FieldError(f"{path.name}: {k}", "unknown field") for k in doc if k != key)
    return items, found


def _read(path: Path) -> tuple[Any, list[FieldError], dict[str, int]]:
    """The YAML document at ``path``, its duplicate keys as findings at ``NAME: field``, and the line each
    field path is written on; a Problem when it cannot be read or is not YAML."""
    from datum.host.document import parse

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise Problem.one(ErrorCode.INVALID_INPUT, f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    lines: dict[str, int] = {}
    doc, parsed = parse(text, str(path), lines)
    return doc, [FieldError(f"{path.name}: {f.field}", f.message) for f in parsed], lines


def load_rules(directory: Path) -> Rules:
    """``directory/nodes.yaml`` read (its rules, labels and ``reboot_order``); a Problem with every finding when
    it is not valid."""
    from pydantic import ValidationError

    from datum.fleet.nodes_model import NodesFile
    from datum.validation import model_errors

    path = directory / NODES
    doc, found, lines = _read(path)
    raw = doc if isinstance(doc, dict) else {}
    model = None
    try:
        model = NodesFile.model_validate(raw)
    except ValidationError as exc:
        found.extend(FieldError(f"{NODES}: {f.field}", f.message) for f in model_errors(exc, NodesFile))
    found.extend(_related(raw, directory))
    if found or model is None:
        at: dict[str, FieldError] = {}
        for f in found:  # one finding a field: the shape's first, then what relates it to others
            at.setdefault(f.field, f)
        said = [_with_line(f, lines) for f in sorted(at.values(), key=lambda f: _line(f, lines))]
        raise invalid(said, f"{path} is not valid: {len(said)} finding{'s' if len(said) > 1 else ''}")
    rules = tuple(
        Rule(
            i, r.match.name, dict(r.match.facts or {}), tuple(r.manifests or ()), dict(r.vars or {}), r.group,
            r.expected, dict(r.match.labels or {}),
        )
        for i, r in enumerate(model.nodes)
    )
    order: dict[str, Order] = {
        group: value if isinstance(value, str) else tuple(value) for group, value in (model.reboot_order or {}).items()
    }
    return Rules(rules, tuple((p, dict(v)) for p, v in (model.labels or {}).items()), order)


def load_nodes(directory: Path) -> tuple[Rules, dict[str, Order]]:
    """The rules of ``directory/nodes.yaml`` and its ``reboot_order`` by group; a Problem with every finding
    (the rules' and the order's) when it is not valid."""
    rules = load_rules(directory)
    return rules, rules.order


def _line(finding: FieldError, lines: dict[str, int]) -> int:
    """The line ``finding``'s field is written on (or its nearest written parent's); 0 when none is."""
    from datum.host.document import line_of

    return line_of(lines, finding.field.removeprefix(f"{NODES}: ")) or 0


def _with_line(finding: FieldError, lines: dict[str, int]) -> FieldError:
    """``finding`` saying the line its field is written on, in the file's order."""
    line = _line(finding, lines)
    if not line or "(line " in finding.message:
        return finding
    return FieldError(finding.field, f"{finding.message} (line {line})")


def _related(raw: dict[str, Any], directory: Path) -> list[FieldError]:
    """What the shape cannot say, on the document as written (so every finding comes at once, whatever else
    is wrong): a rule on facts gives manifests only, and none marked sensitive; a rule gives manifests
    unless it gives a group or ``expected``; ``expected`` names one host; each manifest is in the directory;
    ``reboot_order`` names groups some rule gives, each host once."""
    from datum.fleet.nodes_model import NodeRule

    found: list[FieldError] = []
    items = raw.get("nodes")
    groups = {DEFAULT_GROUP}
    for i, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        here = f"{NODES}: nodes[{i}]"
        given = item.get("match")
        match: dict[str, Any] = given if isinstance(given, dict) else {}
        on_facts = bool(match.get("facts"))
        if isinstance(item.get("group"), str) and item["group"].strip():
            groups.add(item["group"])
        if on_facts:
            found.extend(
                FieldError(f"{here}.{what}", FACTS_GIVE_MANIFESTS_ONLY.format(what=what)) for what in GRANTS if what in item
            )
        name = match.get("name")
        if item.get("expected") is True and (not isinstance(name, str) or _GLOB & set(name) or on_facts):
            found.append(FieldError(
                f"{here}.expected",
                "declares one host: match.name must be its name (no * ? [) and the rule match no facts; "
                "declare many hosts in an inventory file ([reconcilers.hosts] inventory)",
            ))
        manifests = item.get("manifests")
        if not manifests and item.get("group") is None and "expected" not in item:
            found.append(FieldError(f"{here}.manifests", f"required: {NodeRule.model_fields['manifests'].description}"))
        for j, rel in enumerate(manifests if isinstance(manifests, list) else []):
            if not (isinstance(rel, str) and rel):
                continue
            real = (directory / rel).resolve()
            if not real.is_relative_to(directory.resolve()):
                found.append(FieldError(f"{here}.manifests[{j}]", f"{rel} is outside the fleet directory"))
            elif not real.is_file():
                found.append(FieldError(f"{here}.manifests[{j}]", f"no manifest {rel} in the fleet directory"))
            elif on_facts:
                marked = sensitive_in(directory, rel)
                if marked:
                    found.append(FieldError(
                        f"{here}.manifests[{j}]",
                        f"{rel} holds {', '.join(marked)} marked sensitive: a rule that matches on facts (what the "
                        "host's agent claims) adds no sensitive resource; give it by name or labels",
                    ))
    order = raw.get(ORDER)
    for group, value in order.items() if isinstance(order, dict) else ():
        at = f"{NODES}: {ORDER}.{group}"
        if not isinstance(group, str) or group not in groups:
            found.append(FieldError(at, f"no rule gives group {group!r} (groups: {', '.join(sorted(groups))})"))
        seen: set[Any] = set()
        for j, host in enumerate(value if isinstance(value, list) else []):
            if isinstance(host, str) and host in seen:
                found.append(FieldError(f"{at}[{j}]", f"{host} is named twice"))
            elif isinstance(host, str):
                seen.add(host)
    return found


# What ``sensitive:`` says when it says no (pydantic's lax booleans); anything else given is taken as yes.
_NOT_SENSITIVE = frozenset({"false", "no", "off", "f", "n", "0"})


def sensitive_in(directory: Path, rel: str) -> list[str]:
    """The resources of the manifest ``rel`` (its includes' too) marked ``sensitive``, by identity. A file
    that does not read or parse holds none here: the composition says what is wrong with it."""
    from datum.host.include import expand

    directory = directory.resolve()
    doc, _found = expand({"include": [rel]}, directory / NODES, directory)
    marked = []
    for item in doc.get("resources") or ():
        if not (isinstance(item, dict) and len(item) == 1):
            continue
        ((identity, body),) = item.items()
        said = body.get("sensitive") if isinstance(body, dict) else None
        if said not in (None, False, 0) and str(said).strip().lower() not in _NOT_SENSITIVE:
            marked.append(str(identity))
    return marked


def expected_hosts(rules: Rules) -> dict[str, int]:
    """The hosts rules declare (``expected: true``), each with the index of the first rule that does."""
    declared: dict[str, int] = {}
    for rule in rules:
        if rule.expected and rule.name is not None:
            declared.setdefault(rule.name, rule.index)
    return declared




def classify(rules: Rules, host: str, facts: dict[str, Any],
             enrolled: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, Any], list[int]]:
    """The manifests (each once, in order), the merged ``vars`` and the indexes of the rules that matched.

    ``vars`` come from the rules on the host's name and labels only (a rule on facts gives none: the loader
    refuses one that would); ``enrolled`` are the labels the host was given at enrollment."""
    labels = rules.labels_of(host, enrolled)
    manifests: list[str] = []
    variables: dict[str, Any] = {}
    matched: list[int] = []
    for rule in rules:
        if rule.matches(host, labels, facts):
            matched.append(rule.index)
            manifests.extend(m for m in rule.manifests if m not in manifests)
            if not rule.on_facts:
                variables.update(rule.vars)
    return manifests, variables, matched


def group_of(rules: Rules, host: str, enrolled: Mapping[str, str] | None = None) -> str | None:
    """``host``'s group: the ``group`` of the last rule that fits its name and labels (``enrolled``: those given
    at enrollment, with nodes.yaml's) and gives one; None when none does. Never from its facts (what it claims):
    the reboot budget, the rollout waves and what the intake records read it."""
    labels = rules.labels_of(host, enrolled)
    found = None
    for rule in rules:
        if rule.group is not None and not rule.on_facts and rule.matches(host, labels, {}):
            found = rule.group
    return found

"""The manifest: YAML of resources keyed ``Type[name]``, validated whole before anything is touched.

Every finding comes back at once, each at its field path
(``resources[2].File[nginx.conf].mode``), in the contract's error shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datum.core.findings import FieldError, Problem, invalid
from datum.host.order import cycles, topological
from datum.providers.registry import TYPES, provider

if TYPE_CHECKING:
    from datum.providers.specs import Spec

IDENTITY = re.compile(r"^([A-Z][A-Za-z0-9]*)\[(.+)\]$")
_TOP = {"resources"}


@dataclass(frozen=True)
class Resource:
    """One validated resource of the manifest."""

    index: int
    type: str
    name: str
    spec: Spec

    @property
    def id(self) -> str:
        return f"{self.type}[{self.name}]"

    @property
    def needs(self) -> list[str]:
        return [*self.spec.requires, *self.spec.subscribes]


@dataclass(frozen=True)
class Manifest:
    """A valid manifest: its resources in file order, the order a pass walks them, the paths they manage."""

    dir: Path
    resources: tuple[Resource, ...]
    order: tuple[int, ...]
    source: str = "<manifest>"
    paths: frozenset[str] = field(default_factory=frozenset)

    def ordered(self) -> list[Resource]:
        return [self.resources[i] for i in self.order]


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate the manifest at ``path``; raise a Problem listing every finding."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise Problem.one("INVALID_INPUT", f"manifest {file} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise Problem.one("INVALID_INPUT", f"cannot read manifest {file}: {exc}") from exc
    return parse_manifest(text, file.resolve().parent, str(file.resolve()))


# A Type[name] reference right after a flow collection opens or a comma: YAML
# forbids "[" in a plain scalar there, but Puppet users write it that way.
_FLOW_REF = re.compile(r"(?<=[\[{,])(\s*)([A-Z][A-Za-z0-9]*\[[^\[\]\n\"']*\])(?=\s*[\]},:])")


def quote_identities(text: str) -> str:
    """Quote ``Type[name]`` items of flow lists and maps (``requires: [Package[nginx]]``)."""
    return _FLOW_REF.sub(lambda m: f'{m.group(1)}"{m.group(2)}"', text)


def _yaml(text: str, source: str) -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        # Only when plain YAML fails: a block scalar that merely looks like a flow list stays as written.
        rewritten = quote_identities(text)
        if rewritten != text:
            try:
                return yaml.load(rewritten, Loader=loader)  # noqa: S506
            except yaml.YAMLError:
                pass
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise invalid(
            [FieldError("", f"not valid YAML{where}: {problem}")], f"manifest {source} is not valid"
        ) from exc


def parse_manifest(text: str, directory: Path, source: str = "<manifest>") -> Manifest:
    """Validate a manifest's text; ``directory`` is where ``source`` and ``template`` files are."""
    doc = _yaml(text, source)
    found: list[FieldError] = []
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise invalid(
            [FieldError("", "a manifest is a mapping with a 'resources' list")],
            f"manifest {source} is not valid",
        )
    for key in doc:
        if key not in _TOP:
            found.append(FieldError(str(key), "unknown field"))
    items = doc.get("resources")
    if items is None:
        found.append(FieldError("resources", "required: a list of resources keyed Type[name]"))
        items = []
    elif not isinstance(items, list):
        found.append(FieldError("resources", "a list of resources keyed Type[name]"))
        items = []

    resources: list[Resource] = []
    first: dict[str, int] = {}
    declared: dict[
        str, int
    ] = {}  # every identity, valid or not, so a reference to a broken one is not a second finding
    for i, item in enumerate(items):
        identity, resource = _resource(i, item, directory, found)
        if identity is None:
            continue
        if identity in declared:
            found.append(
                FieldError(
                    f"resources[{i}].{identity}", f"duplicate of resources[{declared[identity]}]"
                )
            )
            continue
        declared[identity] = i
        if resource is not None:
            first[resource.id] = len(resources)
            resources.append(resource)

    paths = _paths(resources, found)
    needs = _references(resources, first, set(declared), found)
    for cycle in cycles(len(resources), needs):
        names = " -> ".join(resources[n].id for n in cycle)
        r = resources[cycle[0]]
        found.append(
            FieldError(f"resources[{r.index}].{r.id}.requires", f"requires cycle: {names}")
        )
    if found:
        count = len(found)
        raise invalid(
            found,
            f"manifest {source} is not valid: {count} finding{'s' if count > 1 else ''}, nothing applied",
        )
    order = topological(len(resources), needs)
    return Manifest(directory, tuple(resources), tuple(order), source, frozenset(paths))


def _resource(
    i: int, item: Any, directory: Path, found: list[FieldError]
) -> tuple[str | None, Resource | None]:
    """The item's identity (None when it has none) and the resource (None when it is not valid)."""
    here = f"resources[{i}]"
    if not isinstance(item, dict) or len(item) != 1:
        found.append(FieldError(here, "a resource is a mapping with one key, Type[name]"))
        return None, None
    ((key, body),) = item.items()
    match = IDENTITY.match(str(key))
    if not match:
        found.append(FieldError(here, f"{key!r} is not an identity of the form Type[name]"))
        return None, None
    type_name, name = match.groups()
    here = f"{here}.{key}"
    if len(name) > 900:  # the pass report's limit, so a report is never refused for it
        found.append(FieldError(here, "a name is at most 900 characters"))
        return None, None
    if type_name not in TYPES:
        found.append(
            FieldError(
                here, f"unknown resource type {type_name!r}; known: {', '.join(sorted(TYPES))}"
            )
        )
        return key, None
    if body is None:
        body = {}
    if not isinstance(body, dict):
        found.append(FieldError(here, "the attributes of a resource are a mapping"))
        return key, None
    # Here, not at the top: a pass over a manifest validated before never needs pydantic.
    from pydantic import ValidationError

    from datum.providers.specs import SPECS
    from datum.validation import field_errors

    spec_model = SPECS[type_name]
    if spec_model.namevar and spec_model.namevar not in body:
        body = {**body, spec_model.namevar: name}
    try:
        spec = spec_model.model_validate(body)
    except ValidationError as exc:
        found.extend(
            FieldError(e.field, e.message.removeprefix("Value error, "))
            for e in field_errors(exc, here)
        )
        return key, None
    missing = False
    for attr in ("source", "template"):
        value = getattr(spec, attr, None)
        if value is not None and not (directory / value).is_file():
            found.append(FieldError(f"{here}.{attr}", f"no file {value} next to the manifest"))
            missing = True
    return key, None if missing else Resource(i, type_name, name, spec)


def _references(
    resources: list[Resource], first: dict[str, int], declared: set[str], found: list[FieldError]
) -> dict[int, list[int]]:
    needs: dict[int, list[int]] = {}
    for n, r in enumerate(resources):
        for attr in ("requires", "subscribes"):
            for k, ref in enumerate(getattr(r.spec, attr)):
                where = f"resources[{r.index}].{r.id}.{attr}[{k}]"
                if not IDENTITY.match(ref):
                    found.append(
                        FieldError(where, f"{ref!r} is not an identity of the form Type[name]")
                    )
                elif ref not in declared:
                    found.append(FieldError(where, f"no resource {ref} in the manifest"))
                elif ref not in first:
                    continue  # that resource has its own finding
                else:
                    needs.setdefault(n, []).append(first[ref])
    return needs


def _paths(resources: list[Resource], found: list[FieldError]) -> set[str]:
    """Every path some resource manages; two resources managing one path is a finding."""
    owner: dict[str, Resource] = {}
    for r in resources:
        for p in provider(r.type).paths(r.spec):
            if p in owner:
                found.append(
                    FieldError(
                        f"resources[{r.index}].{r.id}.path",
                        f"{p} is already managed by {owner[p].id}",
                    )
                )
            else:
                owner[p] = r
    return set(owner)

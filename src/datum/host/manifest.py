"""The manifest: YAML of resources keyed ``Type[name]``, validated whole before anything is touched.

Every finding comes back at once, each at its field path
(``resources[2].File[nginx.conf].mode``), in the contract's error shape.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from datum.core.findings import FieldError, Problem, invalid
from datum.host.model import MAX_BYTES, Manifest, Resource
from datum.host.order import cycles, topological
from datum.providers.facts import NAMES as FACT_NAMES
from datum.providers.registry import Unloadable, provider, types

IDENTITY = re.compile(r"^([A-Z][A-Za-z0-9]*)\[(.+)\]$")
_TOP = {"resources", "include"}


@dataclass
class SpecMemory:
    """Resources validated before, so a changed manifest validates only what changed in it.

    ``known`` maps a resource's key (``spec_key``: its type, name and attributes as
    YAML built them) to its validated attributes (the spec model's dump); a resource
    found there is not validated by pydantic again, and a manifest whose every
    resource is found imports no pydantic at all. ``used`` collects the key and dump
    of every resource of this manifest, found or validated now, for next time.
    Whoever keeps it keys the whole of it on the code of the models (``datum.host.compiled``).
    """

    known: dict[str, dict[str, Any]] = field(default_factory=dict)
    used: dict[str, dict[str, Any]] = field(default_factory=dict)


def spec_key(type_name: str, name: str, body: dict[str, Any]) -> str | None:
    """``repr`` tells every YAML value apart (``1``, ``"1"``, ``true`` and ``1.0`` are four
    reprs; dates and nested maps in order), so equal keys mean equal input to the model."""
    try:
        return f"{type_name}[{name}]\0{body!r}"
    except RecursionError:
        return None


def spec_dump(spec: Any) -> dict[str, Any]:
    """The attributes of a validated spec: a pydantic model's dump, or a remembered one's."""
    dump = getattr(spec, "model_dump", None)
    return dump() if dump is not None else dict(vars(spec))


def load_manifest(
    path: str | Path,
    *,
    allow_source_outside: bool = False,
    memory: SpecMemory | None = None,
    data: bytes | None = None,
) -> Manifest:
    """Read and validate the manifest at ``path`` (its bytes ``data`` when the caller read them);
    raise a Problem listing every finding.

    ``allow_source_outside`` lets a ``source`` name a file outside the manifest's directory
    (``datum apply --allow-source-outside``); templates always stay inside it.
    """
    file = Path(path)
    try:
        if data is None:
            with file.open("rb") as stream:
                data = stream.read(MAX_BYTES + 1)
    except FileNotFoundError as exc:
        raise Problem.one("INVALID_INPUT", f"manifest {file} does not exist") from exc
    except OSError as exc:
        raise Problem.one(
            "INVALID_INPUT", f"cannot read manifest {file}: {exc.strerror or exc}"
        ) from exc
    if len(data) > MAX_BYTES:
        raise Problem.one("INVALID_INPUT", f"manifest {file} is larger than {MAX_BYTES:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Problem.one(
            "INVALID_INPUT",
            f"cannot read manifest {file}: not UTF-8 ({exc.reason} at byte {exc.start})",
        ) from exc
    resolved = file.resolve()
    return parse_manifest(
        text, resolved.parent, str(resolved), allow_source_outside=allow_source_outside, memory=memory
    )


# A Type[name] reference right after a flow collection opens or a comma: YAML
# forbids "[" in a plain scalar there, but Puppet users write it that way.
_FLOW_REF = re.compile(r"(?<=[\[{,])(\s*)([A-Z][A-Za-z0-9]*\[[^\[\]\n\"']*\])(?=\s*[\]},:])")


def quote_identities(text: str) -> str:
    """Quote ``Type[name]`` items of flow lists and maps (``requires: [Package[nginx]]``)."""
    return _FLOW_REF.sub(lambda m: f'{m.group(1)}"{m.group(2)}"', text)


# Bounds on what a manifest may be, so a hostile one costs bounded memory and time:
# its size, how deep it nests, and how many nodes it has once every alias is expanded
# (a "billion laughs" document is a few hundred bytes that expand to 10**9 nodes).
# MAX_BYTES: datum.host.model (the bytes are read before this module is imported).
MAX_DEPTH = 64
MAX_NODES = 1_000_000

_MERGE = "tag:yaml.org,2002:merge"


class _Refused(Exception):
    """The document is over a bound; the finding says where."""

    def __init__(self, finding: FieldError) -> None:
        super().__init__(finding.message)
        self.finding = finding


def _line(node: Any) -> str:
    mark = getattr(node, "start_mark", None)
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


def _inspect(root: Any, key_of: Any) -> list[FieldError]:
    """Walk the composed node graph once, without recursion and before anything is constructed.

    Refuses (``_Refused``) a recursive alias, nesting deeper than ``MAX_DEPTH`` and more than
    ``MAX_NODES`` nodes once aliases are expanded; returns duplicate mapping keys as findings
    (PyYAML would silently keep the last). An aliased node is walked once: its expanded size
    and height are remembered, so the walk costs what the text costs, not what it expands to.
    """
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    size: dict[int, int] = {}
    height: dict[int, int] = {}
    open_nodes: set[int] = set()
    duplicates: list[FieldError] = []

    def join(path: str, key: Any) -> str:
        segment = str(key.value) if isinstance(key, ScalarNode) else "?"
        return f"{path}.{segment}" if path else segment

    def children(node: Any, path: str) -> Iterator[tuple[Any, str]]:
        if isinstance(node, SequenceNode):
            for i, child in enumerate(node.value):
                yield child, f"{path}[{i}]"
        elif isinstance(node, MappingNode):
            for key, value in node.value:
                yield key, path
                yield value, join(path, key)

    def check_keys(node: Any, path: str) -> None:
        seen: dict[Any, Any] = {}
        for key, _value in node.value:
            if not isinstance(key, ScalarNode) or key.tag == _MERGE:
                continue
            try:
                ident = key_of(key)
                hash(ident)
            except Exception:  # noqa: BLE001 - construction reports a key it cannot build
                continue
            if ident in seen:
                duplicates.append(
                    FieldError(
                        join(path, key),
                        f"duplicate key {key.value!r}{_line(key)}: already given{_line(seen[ident])}",
                    )
                )
            else:
                seen[ident] = key

    def refuse(path: str, message: str) -> _Refused:
        return _Refused(FieldError(path, message))

    too_many = f"more than {MAX_NODES:,} values once aliases are expanded (an alias bomb?)"
    too_deep = f"nested deeper than {MAX_DEPTH} levels"
    if not isinstance(root, MappingNode | SequenceNode):
        return duplicates
    if isinstance(root, MappingNode):
        check_keys(root, "")
    open_nodes.add(id(root))
    # Each frame: node, its path, its children, [expanded size so far, height of its tallest child].
    frames: list[tuple[Any, str, Iterator[tuple[Any, str]], list[int]]] = [
        (root, "", children(root, ""), [1, 0])
    ]
    while frames:
        node, path, pending, acc = frames[-1]
        step = next(pending, None)
        if step is None:
            frames.pop()
            open_nodes.discard(id(node))
            size[id(node)], height[id(node)] = acc[0], acc[1] + 1
            if frames:
                parent = frames[-1][3]
                parent[0] += acc[0]
                parent[1] = max(parent[1], acc[1] + 1)
                if parent[0] > MAX_NODES:
                    raise refuse(path, too_many)
            continue
        child, child_path = step
        depth = len(frames) + 1
        if isinstance(child, ScalarNode):
            acc[0] += 1
            acc[1] = max(acc[1], 1)
            if acc[0] > MAX_NODES:
                raise refuse(child_path, too_many)
            continue
        if id(child) in open_nodes:
            raise refuse(child_path, f"a recursive alias{_line(child)}: the value contains itself")
        if id(child) in size:  # an alias to a node walked already
            if depth - 1 + height[id(child)] > MAX_DEPTH:
                raise refuse(child_path, too_deep)
            acc[0] += size[id(child)]
            acc[1] = max(acc[1], height[id(child)])
            if acc[0] > MAX_NODES:
                raise refuse(child_path, too_many)
            continue
        if depth > MAX_DEPTH:
            raise refuse(child_path, too_deep)
        if isinstance(child, MappingNode):
            check_keys(child, child_path)
        open_nodes.add(id(child))
        frames.append((child, child_path, children(child, child_path), [1, 0]))
    return duplicates


def _compose(text: str) -> tuple[Any, list[FieldError]]:
    """The document's Python value and its duplicate keys; ``_Refused`` past a bound.

    The parser builds nodes (an alias is a reference, so that is linear in the text);
    ``_inspect`` checks the bounds; only then are Python values constructed.
    """
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, []

        def key_of(key: Any) -> Any:
            return key.value if key.tag == "tag:yaml.org,2002:str" else loader.construct_object(key)

        duplicates = _inspect(node, key_of)
        try:
            return loader.construct_document(node), duplicates
        except yaml.YAMLError:
            raise
        except Exception as exc:  # noqa: BLE001 - PyYAML's own bugs are the input's findings
            # E.g. ValueError for a timestamp in month 13 or an int of 5,000 digits,
            # AttributeError for "!!timestamp x".
            raise yaml.constructor.ConstructorError(
                None, None, f"a value YAML cannot build: {exc}", None
            ) from exc
    finally:
        loader.dispose()


def _yaml(text: str, source: str) -> tuple[Any, list[FieldError]]:
    import yaml

    invalid_message = f"manifest {source} is not valid"
    if len(text) > MAX_BYTES:
        raise invalid(
            [FieldError("", f"a manifest is at most {MAX_BYTES:,} bytes")], invalid_message
        )
    try:
        try:
            return _compose(text)
        except yaml.YAMLError as exc:
            # Only when plain YAML fails: a block scalar that merely looks like a flow list stays as written.
            rewritten = quote_identities(text)
            if rewritten != text:
                try:
                    return _compose(rewritten)
                except yaml.YAMLError:
                    pass
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise invalid(
                [FieldError("", f"not valid YAML{where}: {problem}")], invalid_message
            ) from exc
        except RecursionError as exc:  # the pure-Python parser, where libyaml is missing
            raise invalid(
                [FieldError("", f"nested deeper than {MAX_DEPTH} levels")], invalid_message
            ) from exc
    except _Refused as refused:
        raise invalid([refused.finding], f"{invalid_message}: refused before loading it") from None


def parse_manifest(
    text: str,
    directory: Path,
    source: str = "<manifest>",
    *,
    allow_source_outside: bool = False,
    memory: SpecMemory | None = None,
) -> Manifest:
    """Validate a manifest's text; ``directory`` is where ``source`` and ``template`` files are."""
    directory = directory.resolve()
    read: list[tuple[str, str]] = []  # the included files, by the digest of what was read
    doc, found = _yaml(text, source)
    if doc is None:
        doc = {}
    if isinstance(doc, dict) and "include" in doc:
        from datum.host.include import expand

        top = Path(source) if Path(source).is_absolute() else directory / "<manifest>"
        doc, included = expand(doc, top, directory, read)
        found.extend(included)
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
        identity, resource = _resource(i, item, directory, found, allow_source_outside, memory)
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
    return Manifest(directory, tuple(resources), tuple(order), source, frozenset(paths), tuple(read))


def _resource(
    i: int,
    item: Any,
    directory: Path,
    found: list[FieldError],
    allow_source_outside: bool = False,
    memory: SpecMemory | None = None,
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
    known = types()
    if type_name not in known:
        found.append(
            FieldError(
                here, f"unknown resource type {type_name!r}; known: {', '.join(sorted(known))}"
            )
        )
        return key, None
    try:
        prov = provider(type_name)
    except Unloadable as exc:  # a broken plugin refuses its own resources, not the manifest's others
        found.append(FieldError(here, str(exc)))
        return key, None
    if body is None:
        body = {}
    if not isinstance(body, dict):
        found.append(FieldError(here, "the attributes of a resource are a mapping"))
        return key, None
    remembered = spec_key(type_name, name, body) if memory is not None else None
    dump = memory.known.get(remembered) if memory is not None and remembered is not None else None
    if dump is not None:
        spec: Any = SimpleNamespace(**dump)
    else:
        spec = _validate(prov, name, body, here, found)
        if spec is None:
            return key, None
    if memory is not None and remembered is not None:
        memory.used[remembered] = dump if dump is not None else spec_dump(spec)
    missing = False
    for attr in ("source", "template"):
        value = getattr(spec, attr, None)
        if value is None:
            continue
        problem, outside = _file_problem(directory, value, attr, allow_source_outside)
        if problem:
            found.append(FieldError(f"{here}.{attr}", problem))
            missing = True
        elif outside is not None:
            # Allowed: the resolved path, so a pass reads exactly the file validated here.
            spec = SimpleNamespace(**{**spec_dump(spec), attr: outside})
    for var in sorted(getattr(spec, "vars", None) or (), key=str):
        if var in FACT_NAMES:
            found.append(
                FieldError(
                    f"{here}.vars.{var}",
                    f"{var!r} is the name of a fact templates see; give the variable another name",
                )
            )
            missing = True
    return key, None if missing else Resource(i, type_name, name, spec)


def _validate(prov: Any, name: str, body: dict[str, Any], here: str, found: list[FieldError]) -> Any:
    """The resource's attributes validated by its provider's spec model, or None with its findings added."""
    # Here, not at the top: a pass over a manifest validated before never needs pydantic.
    from datum.discovery import no_pydantic_plugins

    no_pydantic_plugins()
    from pydantic import ValidationError

    from datum.validation import field_errors

    try:
        spec_model = prov.spec_model()
    except Exception as exc:  # noqa: BLE001 - a plugin's model that cannot be loaded
        found.append(FieldError(here, f"resource type {prov.type}: its spec model cannot be loaded: {exc}"))
        return None
    if prov.namevar and prov.namevar not in body:
        body = {**body, prov.namevar: name}
    try:
        return spec_model.model_validate(body)
    except ValidationError as exc:
        found.extend(
            FieldError(e.field, e.message.removeprefix("Value error, "))
            for e in field_errors(exc, here)
        )
        return None


def _file_problem(
    directory: Path, value: str, attr: str, allow_outside: bool
) -> tuple[str | None, str | None]:
    """What is wrong with a ``source``/``template`` file, and its resolved path when allowed outside."""
    if attr == "template" and Path(value).is_absolute():
        return "a template is a path relative to the manifest's directory", None
    try:
        real = (directory / value).resolve()
        exists = real.is_file()
    except (OSError, ValueError) as exc:  # NUL, a name too long, a symlink loop
        return f"not a usable file name: {getattr(exc, 'strerror', None) or exc}", None
    if not real.is_relative_to(directory):
        if attr == "template":
            return f"{value} is outside the manifest's directory; templates stay next to it", None
        if not allow_outside:
            return (
                f"{value} is outside the manifest's directory "
                "(datum apply --allow-source-outside allows it)",
                None,
            )
        if not exists:
            return f"no file {value}", None
        return None, str(real)
    if not exists:
        return f"no file {value} next to the manifest", None
    return None, None


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

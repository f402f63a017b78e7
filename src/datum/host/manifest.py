"""The manifest: YAML of resources keyed ``Type[name]``, validated whole before anything is touched.

Every finding comes back at once, each at its field path
(``resources[2].File[nginx.conf].mode``), in the contract's error shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datum.core.findings import ErrorCode, FieldError, Problem, invalid
from datum.host.document import parse
from datum.host.model import MAX_BYTES, Manifest, Resource
from datum.host.order import cycles, topological
from datum.providers.base import Attributes, Beside
from datum.providers.registry import Unloadable, provider, refusal, types

IDENTITY = re.compile(r"^([A-Z][A-Za-z0-9]*)\[(.+)\]$")
_TOP = {"resources", "include"}


@dataclass
class SpecMemory:
    """Resources validated before, so a changed manifest validates only what changed in it.

    ``known`` maps a resource's key (``spec_key``: its type, name and attributes as
    YAML built them) to its validated attributes (the spec model's dump, as the pass's
    ``Attributes`` hold them); a resource
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
        raise Problem.one(ErrorCode.INVALID_INPUT, f"manifest {file} does not exist") from exc
    except OSError as exc:
        raise Problem.one(
            ErrorCode.INVALID_INPUT, f"cannot read manifest {file}: {exc.strerror or exc}"
        ) from exc
    if len(data) > MAX_BYTES:
        raise Problem.one(ErrorCode.INVALID_INPUT, f"manifest {file} is larger than {MAX_BYTES:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Problem.one(
            ErrorCode.INVALID_INPUT,
            f"cannot read manifest {file}: not UTF-8 ({exc.reason} at byte {exc.start})",
        ) from exc
    resolved = file.resolve()
    return parse_manifest(
        text, resolved.parent, str(resolved), allow_source_outside=allow_source_outside, memory=memory
    )


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
    doc, found = parse(text, source)
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
    besides: list[str] = []
    for i, item in enumerate(items):
        identity, resource = _resource(i, item, directory, found, besides, allow_source_outside, memory)
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
    return Manifest(
        directory, tuple(resources), tuple(order), source, frozenset(paths), tuple(read), tuple(besides)
    )


def _resource(
    i: int,
    item: Any,
    directory: Path,
    found: list[FieldError],
    besides: list[str],
    allow_source_outside: bool = False,
    memory: SpecMemory | None = None,
) -> tuple[str | None, Resource | None]:
    """The item's identity (None when it has none) and the resource (None when it is not valid);
    the files beside the manifest a valid one reads are added to ``besides``."""
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
        why = refusal(type_name)  # declared, but by two distributions: neither's
        found.append(FieldError(here, why or f"unknown resource type {type_name!r}; known: {', '.join(sorted(known))}"))
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
    if dump is None:
        model = _validate(prov, name, body, here, found)
        if model is None:
            return key, None
        dump = model.model_dump()
    if memory is not None and remembered is not None:
        memory.used[remembered] = dump
    spec = Attributes(**dump)
    missing = False
    files: list[str] = []
    for beside in prov.beside(spec):
        problem, outside = _file_problem(directory, beside, allow_source_outside)
        if problem:
            found.append(FieldError(f"{here}.{beside.attribute}", problem))
            missing = True
        elif outside is not None:
            # Allowed: the resolved path, so a pass reads exactly the file validated here.
            spec = Attributes(**{**vars(spec), beside.attribute: outside})
        files.append(str(directory / (outside or beside.path)))
    if missing:
        return key, None
    besides.extend(files)
    return key, Resource(i, type_name, name, spec)


def _validate(prov: Any, name: str, body: dict[str, Any], here: str, found: list[FieldError]) -> Any:
    """The resource's spec model validated by its provider's spec model, or None with its findings added."""
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


def _file_problem(directory: Path, beside: Beside, allow_outside: bool) -> tuple[str | None, str | None]:
    """What is wrong with a file next to the manifest (``Provider.beside``), and its resolved path
    when it is allowed outside the manifest's directory."""
    value, attr = beside.path, beside.attribute
    if not beside.may_leave and Path(value).is_absolute():
        return f"a {attr} is a path relative to the manifest's directory", None
    try:
        real = (directory / value).resolve()
        exists = real.is_file()
    except (OSError, ValueError) as exc:  # NUL, a name too long, a symlink loop
        return f"not a usable file name: {getattr(exc, 'strerror', None) or exc}", None
    if not real.is_relative_to(directory):
        if not beside.may_leave:
            return f"{value} is outside the manifest's directory; {attr}s stay next to it", None
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

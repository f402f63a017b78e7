"""``include:`` in manifests: one document made of a manifest and every manifest it includes.

Paths in ``include`` are relative to the including file. A file included twice
(a diamond) counts once; a file that includes itself, directly or not, is a
finding naming the cycle. An identity must be unique across the whole
composition: a second one is a finding naming both files. ``source`` and
``template`` paths of an included resource are rewritten relative to the top
manifest's directory, which they must stay inside, as for any manifest.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from datum.core.findings import FieldError

MAX_FILES = 1000


def _name(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def _read(path: Path, read: list[tuple[str, str]] | None = None) -> str:
    """An included file's text; its path and the BLAKE2 of the bytes read are added to ``read``."""
    from datum.host.model import MAX_BYTES

    with path.open("rb") as stream:
        data = stream.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES:,} bytes")
    if read is not None:
        from datum.host.digest import of_bytes

        read.append((str(path), of_bytes(data)))
    return data.decode("utf-8")


def _rebased(item: Any, here: Path, base: Path) -> Any:
    """A resource of a file in ``here`` with its ``source``/``template`` relative to ``base``."""
    if here == base or not isinstance(item, dict) or len(item) != 1:
        return item
    ((key, body),) = item.items()
    if not isinstance(body, dict):
        return item
    body = dict(body)
    for attr in ("source", "template"):
        value = body.get(attr)
        if isinstance(value, str) and value and not os.path.isabs(value):
            body[attr] = os.path.relpath(os.path.normpath(here / value), base)
    return {key: body}


def expand(
    doc: dict[str, Any], file: Path, base: Path, read: list[tuple[str, str]] | None = None
) -> tuple[dict[str, Any], list[FieldError]]:
    """``doc`` (the parsed manifest at ``file``) with every included manifest's resources before its own.

    ``base`` is the top manifest's directory. Findings: an include that is not
    a list of paths, a file that cannot be read or parsed, an include cycle,
    and an identity declared in two files. ``read`` receives each included
    file's path and the digest of the bytes it was made from.
    """
    from datum.core.findings import Problem
    from datum.host.document import parse

    found: list[FieldError] = []
    resources: list[Any] = []
    origin: dict[str, str] = {}
    done: set[Path] = set()

    def walk(document: dict[str, Any], path: Path, stack: list[Path]) -> None:
        name = _name(path, base)
        includes = document.get("include") or []
        if not isinstance(includes, list) or not all(isinstance(i, str) and i for i in includes):
            found.append(FieldError(f"{name}: include", "a list of manifest paths, relative to this file"))
            includes = []
        for i, rel in enumerate(includes):
            target = Path(os.path.normpath(path.parent / rel))
            where = f"{name}: include[{i}]"
            if target in stack:
                chain = " -> ".join(_name(p, base) for p in [*stack[stack.index(target) :], target])
                found.append(FieldError(where, f"include cycle: {chain}"))
                continue
            if target in done:
                continue
            if len(done) >= MAX_FILES:
                found.append(FieldError(where, f"more than {MAX_FILES} included manifests"))
                return
            done.add(target)
            try:
                text = _read(target, read)
            except (OSError, ValueError) as exc:
                found.append(FieldError(where, f"cannot read {rel}: {getattr(exc, 'strerror', None) or exc}"))
                continue
            try:
                child, more = parse(text, str(target))
            except Problem as problem:
                for finding in problem.findings:
                    found.extend(FieldError(f"{_name(target, base)}: {f.field}", f.message) for f in finding.fields)
                continue
            found.extend(FieldError(f"{_name(target, base)}: {f.field}", f.message) for f in more)
            if child is None:
                continue
            if not isinstance(child, dict):
                found.append(FieldError(where, f"{rel} is not a manifest (a mapping with 'resources')"))
                continue
            for key in child:
                if key not in ("resources", "include"):
                    found.append(FieldError(f"{_name(target, base)}: {key}", "unknown field"))
            walk(child, target, [*stack, target])
        items = document.get("resources") or []
        if not isinstance(items, list):
            found.append(FieldError(f"{name}: resources", "a list of resources keyed Type[name]"))
            return
        for item in items:
            key = next(iter(item)) if isinstance(item, dict) and len(item) == 1 else None
            if isinstance(key, str):
                first = origin.get(key)
                if first is not None and first != name:
                    found.append(
                        FieldError(f"{name}: {key}", f"{key} in {name} duplicates the one in {first}")
                    )
                    continue
                origin.setdefault(key, name)
            resources.append(_rebased(item, path.parent, base))

    top = Path(os.path.normpath(file))
    done.add(top)
    walk(doc, top, [top])
    composed = {k: v for k, v in doc.items() if k != "include"}
    composed["resources"] = resources
    return composed, found

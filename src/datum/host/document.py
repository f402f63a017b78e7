"""A manifest's YAML, read within bounds: every duplicate key a finding, an alias bomb refused.

The manifest (``datum.host.manifest``), the files it includes (``datum.host.include``)
and the fleet's node rules (``datum.fleet.nodes``) are all read here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from datum.core.findings import FieldError, invalid
from datum.host.model import MAX_BYTES

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


def _inspect(root: Any, key_of: Any, lines: dict[str, int] | None = None) -> list[FieldError]:
    """Walk the composed node graph once, without recursion and before anything is constructed.

    Refuses (``_Refused``) a recursive alias, nesting deeper than ``MAX_DEPTH`` and more than
    ``MAX_NODES`` nodes once aliases are expanded; returns duplicate mapping keys as findings
    (PyYAML would silently keep the last). An aliased node is walked once: its expanded size
    and height are remembered, so the walk costs what the text costs, not what it expands to.
    ``lines``, when given, receives the line (1-based) each field path is written on: a mapping
    entry's key's, a list item's own (an aliased node's inner paths: where the anchor is).
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
                if lines is not None:
                    lines.setdefault(f"{path}[{i}]", child.start_mark.line + 1)
                yield child, f"{path}[{i}]"
        elif isinstance(node, MappingNode):
            for key, value in node.value:
                if lines is not None:
                    lines.setdefault(join(path, key), key.start_mark.line + 1)
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


def _compose(text: str, lines: dict[str, int] | None = None) -> tuple[Any, list[FieldError]]:
    """The document's Python value and its duplicate keys; ``_Refused`` past a bound; ``lines``: see ``_inspect``.

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

        duplicates = _inspect(node, key_of, lines)
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


def parse(text: str, source: str, lines: dict[str, int] | None = None) -> tuple[Any, list[FieldError]]:
    """The document's Python value and its duplicate keys as findings; a Problem when it is not
    YAML or is over a bound (``source`` names it in the message). ``lines``, when given, receives the
    line each field path (``nodes[2].match.name``) is written on, for findings made later (``line_of``)."""
    import yaml

    invalid_message = f"manifest {source} is not valid"
    if len(text) > MAX_BYTES:
        raise invalid(
            [FieldError("", f"a manifest is at most {MAX_BYTES:,} bytes")], invalid_message
        )
    try:
        try:
            return _compose(text, lines)
        except yaml.YAMLError as exc:
            # Only when plain YAML fails: a block scalar that merely looks like a flow list stays as written.
            rewritten = quote_identities(text)
            if rewritten != text:
                try:
                    return _compose(rewritten, lines)
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


def line_of(lines: dict[str, int], path: str) -> int | None:
    """The line ``path`` (a field path as ``parse`` records them) is written on, else its nearest written
    ancestor's (a missing field: the mapping that lacks it); None when nothing of it is written."""
    while path:
        if path in lines:
            return lines[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return None

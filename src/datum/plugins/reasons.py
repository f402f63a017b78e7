"""Which reasons a body of code can emit, read from its syntax: the check behind the closed registry.

A reason is emitted as ``Reason.X``, ``Reason("x")``, ``Waiting("x", ...)``,
``registered("x")`` or ``Item(..., reason="x")``. The same scan runs over
Datum's own code in the test suite and over each plugin's package when it is
loaded, so an unregistered reason fails the build and refuses the plugin.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from datum.core.vocab import Reason, registered

_CALLS = ("Reason", "Waiting", "registered")


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def emitted(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, reason)`` for every reason the code can emit; ``Reason.X`` as ``"Reason.X"``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Reason":
            if not node.attr.startswith("_") and node.attr not in ("value", "name"):
                found.append((node.lineno, f"Reason.{node.attr}"))
        elif isinstance(node, ast.Call):
            name = _name(node.func)
            literal = None
            if name in _CALLS and node.args:
                literal = node.args[0]
            elif name == "Item":
                literal = next((k.value for k in node.keywords if k.arg == "reason"), None)
                if literal is None and len(node.args) >= 3:
                    literal = node.args[2]
            if isinstance(literal, ast.Constant) and isinstance(literal.value, str):
                found.append((node.lineno, literal.value))
    return found


def sources(root: Path) -> list[Path]:
    """The Python files of a module (one file) or a package (its directory, recursively)."""
    if root.name == "__init__.py":
        root = root.parent
    return sorted(root.rglob("*.py")) if root.is_dir() else [root]


def unregistered(files: Iterable[Path], namespace: str | None = None) -> list[str]:
    """``path:line: reason`` for every emitted reason that is not registered.

    With ``namespace``, a plugin reason of another namespace counts as
    unregistered too: a plugin emits the contract's reasons and its own.
    """
    bad = []
    for path in files:
        for line, reason in emitted(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not _ok(reason, namespace):
                bad.append(f"{path}:{line}: {reason}")
    return bad


def _ok(reason: str, namespace: str | None) -> bool:
    if reason.startswith("Reason."):
        return reason.removeprefix("Reason.") in Reason.__members__
    try:
        found = registered(reason)
    except ValueError:
        return False
    return isinstance(found, Reason) or namespace is None or found.partition(".")[0] == namespace

"""Every reason any code path can emit is in the registry, and the registry is the contract's."""

from __future__ import annotations

import ast
from pathlib import Path

import datum
from datum.core.vocab import DESCRIPTIONS, FRAMEWORK_REASONS, REASONS, SPECIFIC_REASONS, Reason

SRC = Path(datum.__file__).parent

CONTRACT_FRAMEWORK = (
    "awaiting_confirmation backoff circuit_breaker dry_run suppressed_restore_mode "
    "suppressed_no_reap suppressed_unconfigured apply_failed blocked_on_owner acting"
).split()
CONTRACT_SPECIFIC = (
    "cooldown process_suspended refresh_stalled rebalance_stalled lb_health_suspect "
    "replace_budget unexpected_state unexpected_kind unexpected_value image_mode"
).split()


def test_registry_is_exactly_the_contracts():
    assert {r.value for r in FRAMEWORK_REASONS} == set(CONTRACT_FRAMEWORK)
    assert {r.value for r in SPECIFIC_REASONS} == set(CONTRACT_SPECIFIC)
    assert set(DESCRIPTIONS) == set(Reason)


def emitted_reasons(tree: ast.AST) -> list[tuple[int, str]]:
    """Reasons a module can emit: ``Reason.X``, ``Reason("x")``, ``Waiting("x", ...)``, ``registered("x")``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Reason":
            if not node.attr.startswith("_") and node.attr not in ("value", "name"):
                found.append((node.lineno, f"Reason.{node.attr}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("Reason", "Waiting", "registered") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.append((node.lineno, arg.value))
    return found


def test_every_emitted_reason_is_registered():
    unregistered = []
    scanned = 0
    for path in SRC.rglob("*.py"):
        for line, reason in emitted_reasons(ast.parse(path.read_text(), str(path))):
            scanned += 1
            if reason.startswith("Reason."):
                ok = reason.removeprefix("Reason.") in Reason.__members__
            else:
                ok = reason in REASONS
            if not ok:
                unregistered.append(f"{path.relative_to(SRC)}:{line}: {reason}")
    assert scanned > 20, "the scan found almost nothing: is it still looking at the code?"
    assert unregistered == []


def test_the_scan_catches_an_unregistered_reason():
    code = 'raise Waiting("stuck_forever", "x")\nr = Reason.NOT_A_REASON\n'
    found = [r for _, r in emitted_reasons(ast.parse(code))]
    assert "stuck_forever" in found and "Reason.NOT_A_REASON" in found
    assert "stuck_forever" not in REASONS and "NOT_A_REASON" not in Reason.__members__

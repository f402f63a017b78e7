"""Every reason any code path can emit is in the registry, and the registry is the contract's."""

from __future__ import annotations

import ast
from pathlib import Path

import datum
from datum.core.vocab import DESCRIPTIONS, FRAMEWORK_REASONS, REASONS, SPECIFIC_REASONS, Reason
from datum.plugins.reasons import emitted, sources, unregistered

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
    return emitted(tree)


def test_every_emitted_reason_is_registered():
    """Datum's code and the plugins shipped in it: the contract's reasons, and each plugin's own once loaded."""
    from datum.plugins import load

    load()  # registers the plugins' reasons, as every command does
    files = sources(SRC / "__init__.py")
    scanned = sum(len(emitted_reasons(ast.parse(p.read_text(), str(p)))) for p in files)
    assert scanned > 20, "the scan found almost nothing: is it still looking at the code?"
    assert unregistered(files) == []
    assert all(r in REASONS for r in {r.value for r in Reason})


def test_the_scan_catches_an_unregistered_reason():
    code = 'raise Waiting("stuck_forever", "x")\nr = Reason.NOT_A_REASON\n'
    found = [r for _, r in emitted_reasons(ast.parse(code))]
    assert "stuck_forever" in found and "Reason.NOT_A_REASON" in found
    assert "stuck_forever" not in REASONS and "NOT_A_REASON" not in Reason.__members__


def test_every_installed_plugin_loads_and_emits_only_reasons_it_registered():
    """The same scan, per plugin and against its own namespace, is what loading a plugin runs."""
    from datum.plugins import load

    loaded = load()
    assert loaded.broken == ()
    names = {p.name for p in loaded.plugins}
    assert {"buckets", "pg_roles"} <= names
    for plugin in loaded.plugins:
        module = plugin.reconciler.partition(":")[0] if isinstance(plugin.reconciler, str) else ""
        root = SRC / "reconcilers" / plugin.name
        if module.startswith("datum.reconcilers."):
            assert unregistered(sources(root / "__init__.py"), plugin.name) == []


def test_a_plugin_reason_of_another_namespace_or_unregistered_is_caught(tmp_path):
    from datum.core.vocab import register_reason

    register_reason("scanme", "stuck", "a test reason")
    code = tmp_path / "p.py"
    code.write_text(
        'raise Waiting("scanme.stuck", "x")\n'
        'raise Waiting("scanme.unknown", "x")\n'
        'ctx.report_items("k", [Item("reap", "a", reason="scanme.stuck")])\n'
        'ctx.report_items("k", [Item("reap", "a", "other.stuck")])\n'
    )
    bad = unregistered([code], "scanme")
    assert [b.rsplit(": ", 1)[1] for b in bad] == ["scanme.unknown", "other.stuck"]
    assert len(unregistered([code], "another")) == 4  # scanme.* belongs to another plugin there

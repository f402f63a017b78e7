"""``datum reconcile``, ``datum drift`` and ``datum reconcilers``."""

from __future__ import annotations

import json
import signal
from typing import TYPE_CHECKING

import click

from datum.cli.common import config_option, json_option, wide_option, wire
from datum.cli.remote import Server, server_options
from datum.core.vocab import Health

if TYPE_CHECKING:
    from datum.reconcile.runner import Tick

# Like `datum apply`'s bit 4: something failed (here, the last pass could not complete,
# or it lost its claim to another pass and wrote nothing).
EXIT_PASS_FAILED = 4
# Like a shell reports a process ended by SIGTERM: the pass stopped after its current item.
EXIT_STOPPED = 128 + signal.SIGTERM


@click.command()
@click.argument("name")
@click.option("--passes", type=click.IntRange(min=1), default=1, show_default=True, help="How many passes to run.")
@config_option
@json_option
def reconcile(name: str, passes: int, config: str | None, as_json: bool) -> None:
    """Run PASSES passes of reconciler NAME now, one after the other.

    The passes take the reconciler's claim like scheduled ticks (never two
    passes at once, whichever process runs them) but not its interval.
    Exits 4 when the last pass could not complete (health ``failing``) or
    lost its claim, 69 when it was skipped because another pass was running;
    on SIGTERM the pass finishes the item it is applying, persists, releases
    the claim and exits 143.
    """
    from datum.core.findings import EXIT_UNAVAILABLE
    from datum.reconcile.runner import Runner, TickOutcome

    w = wire(config)
    w.registry.entry(name)
    runner = Runner(w.registry, w.settings, w.store)
    ticks: list[Tick] = []
    from datum.signals import stop_on

    with stop_on(signal.SIGTERM) as stop:
        for _ in range(passes):
            if stop.is_set():
                break
            ticks.append(runner.tick(name, should_stop=stop.is_set))
    stopped = stop.is_set()
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "pass": n,
                        "outcome": t.outcome.value,
                        **({"health": t.health.value} if t.health else {}),
                        "drift": t.drift,
                        "blocked": t.blocked,
                        "reasons": t.reasons or {},
                        **({"error": t.error} if t.error else {}),
                        **({"stopped": True} if t.stopped else {}),
                    }
                    for n, t in enumerate(ticks, 1)
                ],
                indent=2,
            )
        )
    else:
        _print_ticks(ticks)
    if stopped:
        click.echo(f"datum: {name}: stopped on SIGTERM; what was applied is persisted", err=True)
        click.get_current_context().exit(EXIT_STOPPED)
    if ticks[-1].outcome is TickOutcome.SKIPPED:
        # Nothing ran: not "converged", and not a failed pass either.
        click.echo(
            f"datum: {name}: pass {len(ticks)} skipped: another pass of {name} is running; "
            "it applied nothing",
            err=True,
        )
        click.get_current_context().exit(EXIT_UNAVAILABLE)
    if ticks[-1].health is Health.FAILING or ticks[-1].outcome is TickOutcome.LOST_CLAIM:
        # The last pass could not read desired or actual state: say so to scripts too.
        click.get_current_context().exit(EXIT_PASS_FAILED)


def _print_ticks(ticks: list[Tick]) -> None:
    """One line a pass: its health, drift, blocked and the count of each reason."""
    for n, t in enumerate(ticks, 1):
        if t.health is None:
            click.echo(f"pass {n}: {t.outcome.value}" + (f"; error: {t.error}" if t.error else ""))
            continue
        reasons = ", ".join(f"{k} {v}" for k, v in sorted((t.reasons or {}).items()))
        line = f"pass {n}: health {t.health.value}, drift {t.drift}, blocked {t.blocked}"
        click.echo(line + (f" ({reasons})" if reasons else "") + (f"; error: {t.error}" if t.error else ""))


@click.command()
@click.argument("name")
@config_option
@server_options
@json_option
@wide_option
def drift(name: str, config: str | None, remote: Server | None, as_json: bool, wide: bool) -> None:
    """Show reconciler NAME's drift report: which items diverged and why.

    Items sharing a cause are one row (a tripped breaker's reaps, say), those that need a human first,
    as on the page; then the work-query coverage, stranded statuses flagged.
    """
    import urllib.parse

    from datum.cli import render
    from datum.reconcile.report import (
        DriftReport,
        ReconcilerPolicy,
        drift_report,
        reconciler_policy,
    )
    from datum.reconcile.runner import utcnow

    now = utcnow()
    if remote is not None:
        at = f"/v1/observability/admin/reconcilers/{urllib.parse.quote(name, safe='')}"
        report = DriftReport.model_validate(remote.get(f"{at}/drift"))
        policy = None if as_json else ReconcilerPolicy.model_validate(remote.get(f"{at}/policy"))
    else:
        with wire(config) as w:
            report = drift_report(w.registry, w.settings, w.store, name, now)
            policy = reconciler_policy(w.registry, w.settings, name)
    if as_json or policy is None:
        click.echo(json.dumps(report.dump(), indent=2))
        return
    from datum.core.attention import decide

    out = render.console(wide)
    render.drift(report, out, render.Times(now, wide), policy.thresholds(), policy.backoff_policy())
    render.needs_human(decide([policy.facts(report)]), out, after=True)


@click.command()
@config_option
@json_option
@wide_option
def reconcilers(config: str | None, as_json: bool, wide: bool) -> None:
    """List the registered reconcilers with health, drift, blocked and stranded coverage rows.

    A plugin that could not be loaded is listed with health ``unknown`` and
    its ``error``, and named with the reason on standard error.
    """
    from datum.cli import render
    from datum.reconcile.report import summaries
    from datum.reconcile.runner import utcnow

    w = wire(config)
    now = utcnow()
    rows = summaries(w.registry, w.settings, w.store, now)
    if as_json:
        click.echo(json.dumps([r.dump() for r in rows], indent=2))
    else:
        render.summaries(rows, render.console(wide), render.Times(now, wide))
    for broken in w.registry.refused:
        click.echo(f"datum: plugin {broken.name} ({broken.target}) not loaded: {broken.error}", err=True)

"""Readable terminal output for reports: rich tables, imported only when a human is reading."""

from __future__ import annotations

from typing import TYPE_CHECKING

from datum.core.humanize import age, when

if TYPE_CHECKING:
    from rich.console import Console

    from datum.reconcile.report import DriftReport, ReconcilerSummary

_HEALTH_STYLE = {"ok": "green", "degraded": "yellow", "failing": "bold red", "unknown": "dim"}
_REASON_STYLE = {
    "apply_failed": "bold red",
    "backoff": "red",
    "circuit_breaker": "magenta",
    "suppressed_unconfigured": "yellow",
    "blocked_on_owner": "cyan",
    "acting": "green",
    "awaiting_confirmation": "dim",
}


def console() -> Console:
    import sys

    from rich.console import Console

    # Off a terminal (a pipe, CI) rich would wrap at 80 columns; tables need more.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def _retry_in(passes: int | None) -> str:
    if passes is None:
        return ""
    if passes == 0:
        return "next pass"
    return f"{passes} pass{'' if passes == 1 else 'es'}"


def drift(report: DriftReport, out: Console) -> None:
    """The drift report as a header, an item table and a coverage table."""
    from rich.table import Table

    style = _HEALTH_STYLE.get(report.health.value, "")
    out.print(
        f"[bold]{report.reconciler}[/]  health [{style}]{report.health.value}[/]  "
        f"drift {report.drift}  blocked {report.blocked}  "
        f"as of {when(report.as_of)}  last ran {when(report.last_ran_at)}"
    )
    if report.error:
        out.print(f"[bold red]last pass could not complete:[/] {report.error}")
    if not report.items_reported:
        out.print("[dim]this reconciler does not report items: an empty list means nothing[/]")
    elif report.items:
        columns = ("direction", "id", "reason", "streak", "failures", "retry in", "last error", "desired", "actual")
        rows = [
            (
                i.direction.value,
                i.id,
                f"[{_REASON_STYLE.get(i.reason.value, '')}]{i.reason.value}[/]",
                f"{i.streak}/{i.confirmations_needed}",
                "" if i.failures is None else str(i.failures),
                _retry_in(i.retry_after_passes),
                i.last_err or "",
                i.desired or "",
                i.actual or "",
            )
            for i in report.items
        ]
        # Show only the columns some item has something to say in.
        keep = [n for n in range(len(columns)) if n < 4 or any(row[n] for row in rows)]
        table = Table(title="diverged items", title_justify="left")
        for n in keep:
            table.add_column(columns[n], overflow="fold")
        for row in rows:
            table.add_row(*(row[n] for n in keep))
        out.print(table)
    else:
        if report.last_ran_at is None:
            out.print("no pass has executed yet")
        elif report.error:
            out.print("no items: no pass of this reconciler has completed yet")
        else:
            out.print("no diverged items on the last executed pass")
    if report.dropped:
        out.print(f"[yellow]{report.dropped} more items past driftCap {report.drift_cap} not shown[/]")
    if report.coverage_error:
        out.print(f"[bold red]coverage query failed:[/] {report.coverage_error}")
    elif report.coverage_reported:
        table = Table(title="work-query coverage", title_justify="left")
        for col in ("kind", "status", "count", "selected", "terminal", "owned by", "oldest", "stranded"):
            table.add_column(col)
        for c in report.coverage:
            table.add_row(
                c.kind,
                c.status,
                str(c.count),
                "yes" if c.selected else "no",
                "yes" if c.terminal else "no",
                c.owned_by or "",
                age(c.oldest_age_seconds) if c.count else "",
                "[bold red]STRANDED[/]" if c.stranded else "",
                style="on dark_red" if c.stranded else None,
            )
        out.print(table)


def summaries(rows: list[ReconcilerSummary], out: Console) -> None:
    from rich.table import Table

    table = Table()
    for col in ("reconciler", "health", "drift", "blocked", "stranded", "last ran"):
        table.add_column(col)
    for r in rows:
        style = _HEALTH_STYLE.get(r.health.value, "")
        table.add_row(r.name, f"[{style}]{r.health.value}[/]", str(r.drift), str(r.blocked), str(r.stranded), when(r.last_ran_at))
    out.print(table)

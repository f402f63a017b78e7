"""A host whose agent fell silent: its last report is older than a few of its intervals, so ``unknown``.

The rule over one row; the host listing applies it in SQL (``datum.store.hosts.silent``) so that
its counts and its ``state=`` filter see it too.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from datum.core import hostreasons


def stale(row: dict[str, Any], multiple: float, now: datetime | None = None) -> dict[str, Any]:
    """``row`` (a stored host) as ``unknown``, ``stale`` and with how stale, when its agent's report is overdue.

    Only reports that carry their agent's interval (``datum agent``) can be
    overdue; a one-off ``datum apply`` has no schedule to miss.
    """
    report = row.get("report")
    interval = report.get("intervalSeconds") if isinstance(report, dict) else None
    finished = row.get("finishedAt")
    if not isinstance(interval, int | float) or interval <= 0 or not isinstance(finished, datetime):
        return row
    now = now or datetime.now(UTC)
    if finished.tzinfo is None:
        finished = finished.replace(tzinfo=UTC)
    age = (now - finished).total_seconds()
    if age <= multiple * interval:
        return row
    return {**row, "state": "unknown", "stale": True, "reason": stale_reason(age, multiple, interval, row.get("state"))}


def stale_reason(age: float, multiple: float, interval: float, said: object) -> str:
    """Why a host reads ``unknown``: its last report, ``age`` seconds old, is overdue."""
    return hostreasons.stale(_span(age), multiple, _span(interval), said)


def _span(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"

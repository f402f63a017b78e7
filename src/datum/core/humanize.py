"""Times and ages as an operator reads them, the same in the terminal and on the page.

One absolute form, UTC with its zone (``when``); the terminal shows a time relative to now
(``ago``) and the absolute one with ``--wide``.
"""

from __future__ import annotations

from datetime import UTC, datetime


def utc(value: datetime) -> datetime:
    """``value`` in UTC; a time without a zone is taken as UTC (the stores keep UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def when(value: datetime | None) -> str:
    """``2026-11-29 23:49:10 UTC``, or ``never``."""
    return "never" if value is None else utc(value).strftime("%Y-%m-%d %H:%M:%S UTC")


def age(seconds: float) -> str:
    """``42s``, ``5m 3s``, ``2h 10m``, ``3d 4h``: the two largest units."""
    s = int(seconds)
    if s >= 86400:
        return f"{s // 86400}d {s % 86400 // 3600}h"
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60}m"
    if s >= 60:
        return f"{s // 60}m {s % 60}s"
    return f"{s}s"


def ago(value: datetime | None, now: datetime) -> str:
    """``5m 3s ago``, ``in 30s`` for a time to come, ``just now`` within a second, or ``never``.

    The terminal's short form of a time (``--wide`` shows ``when``'s absolute one instead).
    """
    if value is None:
        return "never"
    seconds = (utc(now) - utc(value)).total_seconds()
    if abs(seconds) < 1:
        return "just now"
    return f"{age(seconds)} ago" if seconds > 0 else f"in {age(-seconds)}"

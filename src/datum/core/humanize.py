"""Times and ages as an operator reads them, the same in the terminal and on the page."""

from __future__ import annotations

from datetime import datetime


def when(value: datetime | None) -> str:
    """``2026-11-29 23:49:10 UTC``, or ``never``."""
    return "never" if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")


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

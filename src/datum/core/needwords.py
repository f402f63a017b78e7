"""The words of the "Needs a human" lines that ``datum explain`` reads back when a line is pasted.

``datum.core.attention`` makes the lines and ``datum.core.phrases`` reads them; attention imports explain,
which imports phrases, so neither can take the words from the other: both take them from here (the
``datum.core.hostreasons`` pattern), and a line can never say what its reader no longer recognises.
"""

from __future__ import annotations

AT_BACKOFF_CAP = "at the backoff cap"  # an item parked there: "... is parked at the backoff cap after 12 failures"
STRANDED_IN = "stranded in"  # "3 bucket rows stranded in archiving (buckets)"
CAME_BACK_UNHEALTHY = "came back from its reboot unhealthy"
HELD_BACK = "held back"  # a host of a wave not released yet: "held back on the previous revision until ..."


def parked(what: str) -> str:
    """``web1 (buckets) is parked at the backoff cap``: ``what`` is the subject of the line."""
    return f"{what} parked {AT_BACKOFF_CAP}"


def stranded(n: int, kind: object, status: object, reconciler: str) -> str:
    return f"{n} {kind} row{'s' if n != 1 else ''} {STRANDED_IN} {status} ({reconciler})"


def came_back_unhealthy(host: str) -> str:
    return f"host {host} {CAME_BACK_UNHEALTHY}"


def held_back(wave: int, rollout: object, released: int) -> str:
    return (f"{HELD_BACK} on the previous revision until its wave {wave} is released "
            f"(rollout {rollout} is at wave {released})")

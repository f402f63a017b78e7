"""The host listing: keyset pages of host summaries, the fleet's state counts, and the page cursor.

A page is hosts by name after a cursor, ``limit`` of them, optionally only
those that read one state; its cursor is opaque to clients (the last name
listed, encoded), so a page never skips or repeats a host whatever is written
meanwhile. The counts cover the whole fleet, whatever the filter. A host
whose agent fell silent reads ``unknown`` (``datum.fleet.stale``) in the rows,
the filter and the counts alike. No pass report is read: the summaries are
written at intake (``datum.core.hostsummary``).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from datum.core.vocab import HostState
from datum.fleet.stale import stale_reason
from datum.store import Store
from datum.store.hosts import group_counts, host_counts, host_page
from datum.store.scope import Groups

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
_PREFIX = "h:"
# A cursor, exactly: base64url without padding of "h:" and at least one byte ("aD" then one of o-r
# spell "h:"), never one more than a multiple of 4 long (no such base64). The API's document
# publishes this pattern and length, and ``host_after`` takes exactly the cursors they allow.
CURSOR_PATTERN = r"^aD[o-r][A-Za-z0-9_-](?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?$"
CURSOR_MAX_LENGTH = 1352  # "h:" and a 253-character name of 4-byte characters
_CURSOR = re.compile(CURSOR_PATTERN)


def cursor_after(host: str) -> str:
    """The cursor of the page that starts after ``host``."""
    return base64.urlsafe_b64encode(f"{_PREFIX}{host}".encode()).decode().rstrip("=")


def host_after(cursor: str) -> str:
    """The position a cursor continues after; ``ValueError`` saying why for a string that is not a cursor.

    Every string ``CURSOR_PATTERN`` allows is a position, whoever made it: bytes that are not UTF-8
    read as U+FFFD, and the name ends at a NUL (no host name holds one, so the page is the same).
    """
    if len(cursor) > CURSOR_MAX_LENGTH or _CURSOR.fullmatch(cursor) is None:
        raise ValueError("not a cursor of this listing: pass the `next` of a previous page as it is")
    data = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    return data[len(_PREFIX):].decode("utf-8", "replace").split("\x00", 1)[0]


@dataclass(frozen=True)
class Page:
    """One page: its host rows (``store.hosts.host_page``, stale ones with why), the fleet's counts, the next cursor."""

    hosts: list[dict[str, Any]]
    counts: dict[str, int]
    next: str | None


def _with_why(row: dict[str, Any], multiple: float, now: datetime) -> dict[str, Any]:
    if row["stale"] and row["finishedAt"] is not None and row["intervalSeconds"]:
        age = (now - row["finishedAt"]).total_seconds()
        return {**row, "reason": stale_reason(age, multiple, row["intervalSeconds"], row["reported"])}
    return row


def page(
    store: Store, multiple: float, now: datetime, *, state: str | None = None, after: str | None = None,
    limit: int = DEFAULT_LIMIT, groups: Groups = None,
) -> Page:
    """Hosts by name after ``after``, at most ``limit``, those reading ``state`` when given, those of ``groups``
    when given (a token scoped to host groups); with every state's count (of those groups' hosts)."""
    rows = host_page(store, multiple, now, state=state, after=after, limit=limit + 1, groups=groups)
    more = len(rows) > limit
    rows = [_with_why(r, multiple, now) for r in rows[:limit]]
    return Page(rows, counts(store, multiple, now, groups), cursor_after(rows[-1]["host"]) if more and rows else None)


def counts(store: Store, multiple: float, now: datetime, groups: Groups = None) -> dict[str, int]:
    """Every host state's count, zero included: of every host, or of ``groups``' hosts (from the counts the store
    keeps by group, never a read of every host)."""
    if groups is None:
        counted = host_counts(store, multiple, now)
    else:
        counted = {}
        for (group, state), n in group_counts(store, multiple, now).items():
            if group in groups:
                counted[state] = counted.get(state, 0) + n
    return {s.value: counted.get(s.value, 0) for s in HostState}


def worst_first(
    store: Store, multiple: float, now: datetime, order: list[str], limit: int, groups: Groups = None
) -> Page:
    """The first ``limit`` hosts taking the states in ``order`` (the page's: failed first), each state's by name.

    One indexed page per state until ``limit`` is reached; the rest are in the counts, and in the pages of
    each state (``page`` with ``state``).
    """
    rows: list[dict[str, Any]] = []
    for state in order:
        if len(rows) >= limit:
            break
        got = host_page(store, multiple, now, state=state, limit=limit - len(rows), groups=groups)
        rows += [_with_why(r, multiple, now) for r in got]
    return Page(rows, counts(store, multiple, now, groups), None)

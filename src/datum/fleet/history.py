"""A host's passes and the fleet's events a page at a time: the keyset cursor and the pages (issue 23).

The rows come from the pass archive (``datum.store.passes``), newest finish first. A page's cursor is the
position of its last row, the pass's or event's finish time (microseconds since the epoch) and its row id
(``MICROS-ID``), so the next page starts strictly after it whatever is written meanwhile: never a row
skipped or repeated. Clients treat it as opaque; the API publishes its pattern (``CURSOR_PATTERN``) and
every string that matches it is a position, whoever made it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from datum.store import Store
from datum.store.hosts import known, unknown_host
from datum.store.passes import After, fleet_events, host_passes

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
# Microseconds from the epoch, signed: any time a host's clock may say (year 1 to 9999) is a position, so a
# pass finished before 1970 or after 2286 (a host with a wrong clock) pages on instead of repeating or failing.
CURSOR_PATTERN = r"^-?[0-9]{1,18}-[0-9]{1,18}$"
_CURSOR = re.compile(CURSOR_PATTERN)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NOT_A_CURSOR = "not a cursor of this listing: pass the `next` of a previous page as it is"


def cursor_of(finished_at: datetime, row_id: int) -> str:
    """The cursor of the page that starts after the row finished at ``finished_at`` with id ``row_id``."""
    micros = (finished_at - _EPOCH) // timedelta(microseconds=1)
    return f"{micros}-{row_id}"


def position(cursor: str) -> After:
    """The position a cursor continues after; ``ValueError`` saying why for a string that is not a cursor."""
    if _CURSOR.fullmatch(cursor) is None:
        raise ValueError(_NOT_A_CURSOR)
    micros, _, row_id = cursor.rpartition("-")
    try:
        return After(_EPOCH + timedelta(microseconds=int(micros)), int(row_id))
    except OverflowError:  # past the calendar's ends: no row is there
        raise ValueError(_NOT_A_CURSOR) from None


def utc(value: datetime) -> datetime:
    """A time with its offset as UTC; one too near the ends of the calendar to move is the end it is near."""
    try:
        return value.astimezone(UTC)
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC) if value.year > 1 else datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Window:
    """When: finished at or after ``since`` and before ``until`` (either open)."""

    since: datetime | None = None
    until: datetime | None = None

    def normal(self) -> Window:
        return Window(None if self.since is None else utc(self.since), None if self.until is None else utc(self.until))


@dataclass(frozen=True)
class Rows:
    """One page of rows and the cursor of the next (None on the last)."""

    rows: list[dict[str, Any]]
    next: str | None


def _paged(rows: list[dict[str, Any]], limit: int) -> Rows:
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if rows else None
    return Rows(rows, cursor_of(last["finishedAt"], last["id"]) if more and last else None)


def passes_page(
    store: Store, host: str, window: Window = Window(), *, state: str | None = None, after: After | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Rows:
    """``host``'s passes, newest finish first, ``limit`` after ``after``, in ``window``, of ``state`` when given;
    ``NOT_FOUND`` for a host the store has never heard of (one whose passes retention dropped: none)."""
    w = window.normal()
    found = _paged(host_passes(store, host, since=w.since, until=w.until, state=state, after=after, limit=limit + 1), limit)
    if not found.rows and after is None and not known(store, host):
        raise unknown_host(host)
    return found


def events_page(
    store: Store, window: Window = Window(), *, after: After | None = None, limit: int = DEFAULT_LIMIT, **exact: str | None
) -> Rows:
    """The fleet's events, newest finish first, ``limit`` after ``after``, in ``window``; ``exact``: host,
    resource, type, action, state, each kept when given."""
    w = window.normal()
    return _paged(fleet_events(store, since=w.since, until=w.until, after=after, limit=limit + 1, **exact), limit)

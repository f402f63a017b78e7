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

from datum.core.vocab import RolloutAct, RolloutState
from datum.store import Store, auditchain
from datum.store.hosts import known, unknown_host
from datum.store.passes import After, fleet_events, host_passes
from datum.store.rollouts import Transition
from datum.store.rollouts import events as rollout_events
from datum.store.scope import among

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
# Microseconds from the epoch, signed: any time a host's clock may say (year 1 to 9999) is a position, so a
# pass finished before 1970 or after 2286 (a host with a wrong clock) pages on instead of repeating or failing.
CURSOR_PATTERN = r"^-?[0-9]{1,18}-r?[0-9]{1,18}$"  # the fleet's events: a pass's event or a rollout's (r)
PASS_CURSOR_PATTERN = r"^-?[0-9]{1,18}-[0-9]{1,18}$"  # a host's passes: no rollout's position is one
_CURSOR = re.compile(CURSOR_PATTERN)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NOT_A_CURSOR = "not a cursor of this listing: pass the `next` of a previous page as it is"


def cursor_of(finished_at: datetime, row_id: int, rollout: bool = False) -> str:
    """The cursor of the page that starts after the row finished at ``finished_at`` with id ``row_id`` (a
    rollout's transition among the fleet's events when ``rollout``: ``MICROS-rID``)."""
    micros = (finished_at - _EPOCH) // timedelta(microseconds=1)
    return f"{micros}-{'r' if rollout else ''}{row_id}"


def position(cursor: str) -> After:
    """The position a cursor continues after; ``ValueError`` saying why for a string that is not a cursor."""
    if _CURSOR.fullmatch(cursor) is None:
        raise ValueError(NOT_A_CURSOR)
    micros, _, row_id = cursor.rpartition("-")
    try:
        return After(_EPOCH + timedelta(microseconds=int(micros)), int(row_id.lstrip("r")), row_id.startswith("r"))
    except OverflowError:  # past the calendar's ends: no row is there
        raise ValueError(NOT_A_CURSOR) from None


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


def _paged(rows: list[dict[str, Any]], limit: int, at: str = "finishedAt", row_id: str = "id") -> Rows:
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if rows else None
    if not (more and last):
        return Rows(rows, None)
    if last.get("type") == ROLLOUT:
        return Rows(rows, cursor_of(last["at"], last["id"], rollout=True))
    return Rows(rows, cursor_of(last[at], last[row_id]))


def passes_page(
    store: Store, host: str, window: Window = Window(), *, state: str | None = None, after: After | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Rows:
    """``host``'s passes, newest finish first, ``limit`` after ``after``, in ``window``, of ``state`` when given;
    ``NOT_FOUND`` for a host the store has never heard of (one whose passes retention dropped: none)."""
    w = window.normal()
    if after is not None and after.rollout:
        raise ValueError(NOT_A_CURSOR)
    found = _paged(host_passes(store, host, since=w.since, until=w.until, state=state, after=after, limit=limit + 1), limit)
    if not found.rows and after is None and not known(store, host):
        raise unknown_host(host)
    return found


def events_page(
    store: Store, window: Window = Window(), *, after: After | None = None, limit: int = DEFAULT_LIMIT,
    groups: frozenset[str] | None = None, **exact: str | None
) -> Rows:
    """The fleet's events, newest first, ``limit`` after ``after``, in ``window``; ``exact``: host, resource,
    type, action, state, each kept when given; of ``groups``' hosts only when given (a token scoped to host
    groups: a rollout's transition names only those of its hosts).

    Two kinds, one order: a resource of a kept pass (by its finish time), and a rollout's transition (type
    ``rollout``, by the store's time of it, ``datum.store.rollouts.events``). At one time a pass's events come
    before a rollout's; within a kind, newest id first. Each kind is read up to the page's size from its
    position and the two merged, so a page costs two index ranges whatever the mix.
    """
    w = window.normal()
    rows: list[dict[str, Any]] = []
    if exact.get("type") != ROLLOUT:
        before = After(after.finished_at, 0) if after is not None and after.rollout else after  # a pass's come first
        rows += fleet_events(store, since=w.since, until=w.until, after=before, limit=limit + 1, groups=groups, **exact)
    if _rollouts_match(exact):
        rows += [rollout_event(t, store, groups) for t in rollout_events(
            store, since=w.since, until=w.until, act=exact.get("action"), state=exact.get("state"),
            rollout=_rollout_named(exact.get("resource")), limit=limit + 1,
            before=None if after is None else (after.finished_at, after.id), inclusive=after is not None and not after.rollout,
        )]
        rows.sort(key=_position, reverse=True)
    return _paged(rows, limit)


ROLLOUT = "rollout"  # the type of a rollout's transition among the fleet's events
_ROLLOUT_RESOURCE = re.compile(r"Rollout\[([0-9]{1,18})\]")


def _position(row: dict[str, Any]) -> tuple[datetime, bool, int]:
    """An event's place in the list, which runs from the greatest down: time, a pass's before a rollout's, id."""
    rollout = row.get("type") == ROLLOUT
    return (row["at"] if rollout else row["finishedAt"], not rollout, int(row["id"]))


def _rollout_named(resource: str | None) -> int | None:
    found = _ROLLOUT_RESOURCE.fullmatch(resource) if resource else None
    return int(found.group(1)) if found else None


def _rollouts_match(exact: dict[str, str | None]) -> bool:
    """Whether a rollout's transitions can match the filters: no host (a transition is the fleet's), a type of
    rollout, a resource ``Rollout[N]``, an act for an action, a rollout state for a state."""
    if exact.get("host") is not None or exact.get("type") not in (None, ROLLOUT):
        return False
    if exact.get("resource") is not None and _rollout_named(exact.get("resource")) is None:
        return False
    action, state = exact.get("action"), exact.get("state")
    return (action is None or action in RolloutAct._value2member_map_) and (
        state is None or state in RolloutState._value2member_map_)


def rollout_event(t: Transition, store: Store | None = None, groups: frozenset[str] | None = None) -> dict[str, Any]:
    """A rollout's transition as the fleet's events list it (``RolloutEvent``); the hosts it names are ``groups``'
    only, when given."""
    hosts = t.hosts
    if hosts and groups is not None and store is not None:
        mine = among(store, hosts, groups)
        hosts = [h for h in hosts if h in mine]
    return {"id": t.id, "type": ROLLOUT, "at": t.at, "rollout": t.rollout, "resource": f"Rollout[{t.rollout}]",
            "revision": t.revision, "action": t.act.value, "state": t.state.value, "wave": t.wave, "by": t.by,
            "reason": t.reason, "hosts": hosts}


def audit_page(
    store: Store, window: Window = Window(), *, principal: str | None = None, action: str | None = None,
    after: After | None = None, limit: int = DEFAULT_LIMIT,
) -> Rows:
    """The audit log (``datum.store.audit``), newest first, ``limit`` after ``after`` (the cursor's id is a row's
    id: its place in the order rows were written, sealed or not), written in ``window``, of ``principal`` and
    ``action`` when given."""
    w = window.normal()
    found = auditchain.entries(store, since=w.since, until=w.until, principal=principal, action=action, after=after,
                          limit=limit + 1)
    return _paged(found, limit, "at", "id")

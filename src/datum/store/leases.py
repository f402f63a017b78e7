"""Reboot leases: at most ``limit`` hosts of a group rebooting at once, granted atomically in the store.

A grant is one transaction that first writes its group's row in
``reboot_groups`` (an upsert that bumps a counter). On PostgreSQL that takes
the row's lock, so grants in one group are serialised across every server
replica until commit, and each statement after it (READ COMMITTED) sees the
leases the previous grant committed. On SQLite the same write takes the
database's write lock before anything is read. Only then are the group's live
leases counted and the host's lease written: two agents asking at once, on one
server or two, can never both take the last slot.

A lease holds from the grant until the host reports from another boot id
(``release_rebooted``, in the pass intake's transaction) or the agent gives it
back (its reboot command failed). One whose ``expires_at`` passed first is
``overdue``: its host did not come back within ``reboot_timeout``, and the
group's reboots halt (no other host of the group is granted one) until that host
reports from a new boot or an operator clears the lease (``clear``, ``datum
reboots clear HOST``): a host that does not come back is looked at before the
next one goes down. Times are the store's clock, the one every server shares.

Health first: a report from a new boot frees the lease only when the host is
back converged and healthy (``datum.core.budget.back_unhealthy``); otherwise the
lease keeps the reason (``unhealthy``) and, past its timeout, halts the group
saying so.

In order: every ask writes the host's request (``reboot_requests``, living
until ``expires_at``, about two of the agent's intervals) under the same group
lock; with a ``reboot_order`` for the group, the free slots go to the first
hosts of the group's live requests in that order, and a host asking out of turn
is told who is ahead. A host that stops asking (it no longer needs a reboot)
holds no one back once its request expired. ``blocked`` (the Prometheus block
query, ``datum.fleet.promblock``, decided before the transaction) refuses every
grant and is said so.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from datum.core.budget import Order, in_order, room
from datum.store import audit
from datum.store.engine import Store
from datum.store.runs import store_now
from datum.store.schema import reboot_groups as groups
from datum.store.schema import reboot_leases as t
from datum.store.schema import reboot_requests as asks
from datum.store.types import insert_for, param

# How long a host's ask stays in the queue when its agent does not say its interval.
REQUEST_TTL = timedelta(hours=1)


@dataclass(frozen=True)
class Lease:
    """One host's reboot lease."""

    host: str
    group: str
    boot_id: str
    since: datetime
    expires_at: datetime
    unhealthy: str | None = None  # the host reported from a new boot, not converged and healthy: why

    def live(self, now: datetime) -> bool:
        return self.expires_at > now

    def as_json(self) -> dict[str, Any]:
        out = {
            "host": self.host,
            "group": self.group,
            "bootId": self.boot_id,
            "since": self.since.isoformat(),
            "expiresAt": self.expires_at.isoformat(),
        }
        if self.unhealthy:
            out["unhealthy"] = self.unhealthy
        return out


@dataclass(frozen=True)
class Waiting:
    """A host that asked for a lease and has none yet: its request, live until ``expires_at``."""

    host: str
    group: str
    asked_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class Grant:
    """The answer to one request: granted or not, and the group's live leases after it (the host's included)."""

    granted: bool
    group: str
    limit: int
    rebooting: tuple[Lease, ...]
    lease: Lease | None  # the host's own lease, when granted
    halted: tuple[Lease, ...] = ()  # overdue leases of the group that halt its reboots, when not granted
    ahead: tuple[str, ...] = ()  # hosts before it in the group's reboot_order, when not granted for that
    blocked: str | None = None  # why every group's reboots are blocked (the Prometheus block query)


def _lease(r: Any) -> Lease:
    return Lease(r.host, r.group_name, r.boot_id, r.since, r.expires_at, r.unhealthy)


def _lock_group(conn: Connection, group: str) -> None:
    """Write the group's row first thing in the transaction: the lock every grant in the group waits on."""
    stmt = insert_for(conn.dialect.name)(groups).values(group_name=group, grants=1)
    conn.execute(
        stmt.on_conflict_do_update(index_elements=[groups.c.group_name], set_={"grants": groups.c.grants + 1})
    )


def _live(conn: Connection, group: str, now: datetime) -> list[Lease]:
    rows = conn.execute(
        sa.select(t).where(t.c.group_name == group, t.c.expires_at > now).order_by(t.c.since, t.c.host)
    )
    return [_lease(r) for r in rows]


def _overdue(conn: Connection, group: str, now: datetime) -> list[Lease]:
    rows = conn.execute(
        sa.select(t).where(t.c.group_name == group, t.c.expires_at <= now).order_by(t.c.since, t.c.host)
    )
    return [_lease(r) for r in rows]


def _ask(conn: Connection, host: str, group: str, boot_id: str, now: datetime, ttl: timedelta) -> None:
    """Write ``host``'s request (under the group's lock): live until ``now + ttl``, first asked kept while live."""
    stmt = insert_for(conn.dialect.name)(asks).values(host=host, group_name=group, boot_id=boot_id, asked_at=now, expires_at=now + ttl)
    conn.execute(stmt.on_conflict_do_update(index_elements=[asks.c.host], set_={
        "group_name": stmt.excluded.group_name,
        "boot_id": stmt.excluded.boot_id,
        "asked_at": sa.case((asks.c.expires_at <= now, stmt.excluded.asked_at), else_=asks.c.asked_at),
        "expires_at": stmt.excluded.expires_at,
    }))


def _queue(conn: Connection, group: str, now: datetime, order: Order, holding: set[str]) -> list[str]:
    """The group's hosts waiting for a lease (a live request, no live lease), in the group's reboot order."""
    rows = conn.execute(sa.select(asks.c.host).where(asks.c.group_name == group, asks.c.expires_at > now))
    return in_order(order, [r.host for r in rows if r.host not in holding])


def take(
    store: Store,
    host: str,
    group: str,
    boot_id: str,
    limit: int,
    ttl: timedelta,
    *,
    order: Order | None = None,
    request_ttl: timedelta = REQUEST_TTL,
    blocked: str | None = None,
) -> Grant:
    """Grant ``host`` (in boot ``boot_id``) a lease in ``group`` when fewer than ``limit`` hold one, it is its
    turn in ``order`` (the group's ``reboot_order``; None: whoever asks first) and nothing ``blocked`` them.

    Asking again in the same boot while the lease lives is granted again,
    unchanged (an agent that restarts before it reboots), unless what would
    refuse a new ask refuses it now (another host's overdue lease, ``blocked``):
    then its lease is given back, so it neither reboots on the earlier yes nor
    turns overdue holding a slot it does not use. A lease from another
    boot is over (the host rebooted since) and replaced. While another host of
    the group holds an overdue lease, nothing is granted (``halted``); the
    host's own expired lease is replaced when there is room. Every ask that is
    not granted at once leaves the host's request (``request_ttl``), which is
    what orders the next grants.
    """
    with store.begin() as conn:
        _lock_group(conn, group)
        now = store_now(conn)
        mine = conn.execute(sa.select(t).where(t.c.host == host)).first()
        stuck = tuple(lease for lease in _overdue(conn, group, now) if lease.host != host)
        if mine is not None and mine.boot_id == boot_id and mine.expires_at > now:
            if not stuck and blocked is None:
                return Grant(True, mine.group_name, limit, tuple(_live(conn, mine.group_name, now)), _lease(mine))
            conn.execute(sa.delete(t).where(t.c.host == host, t.c.boot_id == boot_id))  # asked again, not rebooted
        _ask(conn, host, group, boot_id, now, request_ttl)
        others = [lease for lease in _live(conn, group, now) if lease.host != host]
        if stuck:
            return Grant(False, group, limit, tuple(others), None, stuck)
        if blocked is not None:
            return Grant(False, group, limit, tuple(others), None, blocked=blocked)
        if not room(len(others), limit):
            return Grant(False, group, limit, tuple(others), None)
        if order is not None:
            queue = _queue(conn, group, now, order, {lease.host for lease in others})
            if host not in queue[: limit - len(others)]:
                ahead = queue[: queue.index(host)] if host in queue else queue
                return Grant(False, group, limit, tuple(others), None, ahead=tuple(ahead))
        values = {"group_name": group, "boot_id": boot_id, "since": now, "expires_at": now + ttl, "unhealthy": None}
        if mine is None:
            conn.execute(sa.insert(t).values(host=host, **values))
        else:
            conn.execute(sa.update(t).where(t.c.host == host).values(**values))
        conn.execute(sa.delete(asks).where(asks.c.host == host))  # served: it waits no more
        lease = Lease(host, group, boot_id, now, now + ttl)
        return Grant(True, group, limit, tuple(sorted([*others, lease], key=lambda x: (x.since, x.host))), lease)


def give_back(store: Store, host: str, boot_id: str) -> bool:
    """Drop ``host``'s lease taken in ``boot_id`` (its reboot command failed); whether there was one."""
    with store.begin() as conn:
        gone = conn.execute(sa.delete(t).where(t.c.host == host, t.c.boot_id == boot_id))
    return gone.rowcount > 0


class Live(Exception):
    """The lease ``clear`` was asked to drop is live and its host is not known to be back: it may be rebooting
    now (``lease``), and dropping it would let another host of its group go down meanwhile."""

    def __init__(self, lease: Lease) -> None:
        super().__init__(lease.host)
        self.lease = lease


def clear(store: Store, host: str, *, force: bool = False) -> Lease | None:
    """An operator's decision: drop ``host``'s lease, so that its group's reboots go on; the lease dropped, or
    None when it held none. For a host that will not come back (an overdue lease) or came back unhealthy and
    was looked at. A lease that is live and not marked unhealthy (a host rebooting now, perhaps one that took
    it since the operator looked) is ``Live``, kept, unless ``force``, which drops whatever lease the host
    holds. Without ``force`` the lease dropped is the one read: one taken meanwhile is judged in its turn."""
    for _ in range(3):  # the lease read was replaced before the delete (the host took a new one): read again
        with store.begin() as conn:
            now = store_now(conn)
            found = conn.execute(sa.select(t).where(t.c.host == host)).first()
            if found is None:
                audit.unchanged(conn)
                return None
            if force:  # whatever lease the host holds now
                conn.execute(sa.delete(t).where(t.c.host == host))
                return _lease(found)
            if found.expires_at > now and not found.unhealthy:
                raise Live(_lease(found))
            gone = conn.execute(
                sa.delete(t).where(t.c.host == host, t.c.boot_id == found.boot_id, t.c.since == found.since)
            )
            if not gone.rowcount:
                audit.unchanged(conn)
        if gone.rowcount:
            return _lease(found)
    raise Live(_lease(found))  # replaced at every look: a host that keeps taking leases is no host to clear


def cleared(store: Store, host: str, *, force: bool = False, forcing: str = "--force") -> Lease:
    """``clear``, said as ``datum reboots clear`` and ``DELETE /v1/reboots/{host}`` say it: the lease dropped;
    ``CONFLICT`` for a live one kept (naming it, and ``forcing``: how to drop it anyway), ``NOT_FOUND`` when
    the host holds none."""
    from datum.core.findings import ErrorCode, Problem

    try:
        dropped = clear(store, host, force=force)
    except Live as live:
        lease = live.lease
        raise Problem.one(
            ErrorCode.CONFLICT,
            f"{host} holds a live reboot lease (group {lease.group}, boot {lease.boot_id}, taken "
            f"{lease.since.isoformat()}, until {lease.expires_at.isoformat()}): it may be rebooting now, and "
            f"dropping it lets the next host of its group go down; kept ({forcing} drops it anyway)",
        ) from None
    if dropped is None:
        raise Problem.one(ErrorCode.NOT_FOUND, f"host {host!r} holds no reboot lease")
    return dropped


def on_return(stored: Any = None) -> tuple[Any, Any]:
    """What a host's report from a boot (``p_release``) does to its lease from another boot (it rebooted since),
    as the two statements both stores run (in turn here, as CTEs of the intake's statement on PostgreSQL,
    ``datum.store.hosts``): dropped when the host is back converged and healthy (``p_unhealthy`` NULL), else
    kept, marked with why not (``p_unhealthy``). Only when ``stored`` holds (the intake's: the pass was stored).
    A report without a boot id (``p_release`` NULL) touches no lease."""
    host, why = param("host", t.c.host.type), param("unhealthy", t.c.unhealthy.type)
    other = sa.and_(t.c.host == host, t.c.boot_id != param("release", t.c.boot_id.type), *(() if stored is None else (stored,)))
    return sa.delete(t).where(other, why.is_(None)), sa.update(t).where(other, why.is_not(None)).values(unhealthy=why)


def on_return_params(host: str, boot_id: str | None, unhealthy: str | None) -> dict[str, Any]:
    """The bound values of ``on_return``: the host, its report's boot, why it is not back healthy."""
    return {"p_host": host, "p_release": boot_id or None, "p_unhealthy": None if unhealthy is None else unhealthy[:1000]}


_ON_RETURN = on_return()


def release_rebooted(conn: Connection, host: str, boot_id: str | None, unhealthy: str | None = None) -> bool:
    """In the caller's transaction: drop ``host``'s lease when ``boot_id`` is another boot (it rebooted) and the
    host is back converged and healthy; with ``unhealthy`` (``datum.core.budget.back_unhealthy``: why it is not)
    keep the lease and record why on it (``on_return``). Whether the lease was dropped."""
    return returned(conn, on_return_params(host, boot_id, unhealthy))


def returned(conn: Connection, params: dict[str, Any]) -> bool:
    """``on_return`` run in turn with ``params`` (``on_return_params``' and any others): whether the lease was
    dropped."""
    dropped, marked = _ON_RETURN
    gone = conn.execute(dropped, params).rowcount
    conn.execute(marked, params)
    return bool(gone)


@dataclass(frozen=True)
class Leases:
    """Every lease the store holds, read at the store's ``now``: live ones rebooting, expired ones overdue."""

    now: datetime
    all: tuple[Lease, ...]
    waiting: tuple[Waiting, ...] = ()  # live requests of hosts holding no live lease (read without a host)

    @property
    def rebooting(self) -> list[Lease]:
        return [lease for lease in self.all if lease.live(self.now)]

    @property
    def overdue(self) -> list[Lease]:
        return [lease for lease in self.all if not lease.live(self.now)]

    def of(self, host: str) -> Lease | None:
        return next((lease for lease in self.rebooting if lease.host == host), None)


def read(store: Store, host: str | None = None, groups: frozenset[str] | None = None) -> Leases:
    """The leases (of ``host`` only, when given; of the hosts of ``groups`` only, when given: a token scoped to
    host groups), oldest first; without ``host``, the hosts waiting too."""
    from datum.store.scope import hosts_of

    mine = hosts_of(t.c.host, groups)
    with store.connect() as conn:
        now = store_now(conn)
        query = sa.select(t).order_by(t.c.group_name, t.c.since, t.c.host)
        if host is not None:
            query = query.where(t.c.host == host)
        if mine is not None:
            query = query.where(mine)
        found = tuple(_lease(r) for r in conn.execute(query))
        if host is not None:
            return Leases(now, found)
        holding = {lease.host for lease in found if lease.live(now)}
        waits = sa.select(asks).where(asks.c.expires_at > now)
        if groups is not None:
            waits = waits.where(hosts_of(asks.c.host, groups))
        rows = conn.execute(waits.order_by(asks.c.group_name, asks.c.host))
        waiting = tuple(
            Waiting(r.host, r.group_name, r.asked_at, r.expires_at) for r in rows if r.host not in holding
        )
        return Leases(now, found, waiting)

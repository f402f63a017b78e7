"""Staged rollouts in the store: the newest row of ``rollouts`` is in force, every transition a conditional UPDATE.

Whichever replica sees a new revision first starts its rollout: the next id
is inserted with ``ON CONFLICT DO NOTHING``, so two replicas racing start it
once, and the one that inserted it writes its wave plan (``rollout_hosts``,
``datum.fleet.rollouts.plan``) in the same transaction. Advancing a wave, halting,
pausing, resuming and aborting each update the row only from the state (and
wave) they were decided on (``WHERE id = ? AND wave = ? AND state = ?``): two
replicas deciding at once change it once. Times are the store's clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from datum.core.findings import ErrorCode
from datum.core.vocab import COMMANDS, RolloutAct, RolloutState
from datum.store import audit
from datum.store.engine import Store
from datum.store.hosts import host_state_at, silent
from datum.store.runs import store_now
from datum.store.schema import hosts, revisions, rollout_events, rollout_hosts, rollouts
from datum.store.types import insert_for

ROLLING, PAUSED, HALTED = RolloutState.ROLLING, RolloutState.PAUSED, RolloutState.HALTED
ABORTED, DONE, SUPERSEDED = RolloutState.ABORTED, RolloutState.DONE, RolloutState.SUPERSEDED
STATES = tuple(RolloutState)
OPEN = tuple(s for s in RolloutState if s.under_way)  # a rollout still under way: a newer revision supersedes it
SERVER = "server"  # the author of a transition the server decided (a start, a wave released, a halt, done)
FAILED_KEPT = 50  # failed hosts named in a halted rollout

_REVISION = hosts.c.revision  # the revision the host's last pass ran (migration 0017_revision_counts)
# A failure a resume accepted: the host's last pass is still the one it was then (the resume copies its
# ``updated_at``; compared for equality, never by order: replicas receive passes by their own clocks). Any pass
# received after it counts again, whether it failed anew or after converging.
_ACCEPTED = sa.and_(rollout_hosts.c.accepted_at.is_not(None), hosts.c.updated_at == rollout_hosts.c.accepted_at)
# A released host the rollout's revision could not be served to (``unserved``): its manifest of the revision does
# not validate (failed, as a failed pass on it), or the revision has none for it (not waited for, as silent).
# A resume accepts the first (``UNSERVED_ACCEPTED``): then counted neither failed nor waited for.
UNSERVED_FAILED, UNSERVED_LEFT, UNSERVED_ACCEPTED = ErrorCode.INVALID_INPUT.value, ErrorCode.NOT_FOUND.value, "ACCEPTED"
_BAD = sa.func.coalesce(rollout_hosts.c.unserved_code == UNSERVED_FAILED, sa.false())
_LEFT = sa.func.coalesce(rollout_hosts.c.unserved_code == UNSERVED_LEFT, sa.false())
_UNSERVED_ACCEPTED = sa.func.coalesce(rollout_hosts.c.unserved_code == UNSERVED_ACCEPTED, sa.false())


@dataclass(frozen=True, slots=True)
class RolloutRow:
    id: int
    revision: str
    previous: str | None
    state: RolloutState
    wave: int
    last_wave: int
    started_at: datetime
    wave_started_at: datetime
    wave_completed_at: datetime | None
    updated_at: datetime
    by: str | None
    reason: str | None
    failed: list[dict[str, Any]] | None

    @property
    def version(self) -> tuple[int, str, int]:
        """What changes whenever what a host is served may change."""
        return (self.id, self.state, self.wave)


def _row(r: Any) -> RolloutRow:
    values = {k: r[k] for k in RolloutRow.__slots__}
    values["state"] = RolloutState(values["state"])
    return RolloutRow(**values)


def _record(conn: Connection, row: RolloutRow, act: RolloutAct, at: datetime, by: str = SERVER,
            reason: str | None = None, named: list[str] | None = None) -> None:
    """Store ``act``, which left ``row`` as it now is: the one place a transition is written (in the
    transaction that made it), read back by ``transitions`` and ``GET /v1/events``."""
    assert row.state is act.target or act is RolloutAct.STARTED, (act, row.state)
    conn.execute(sa.insert(rollout_events).values(
        rollout=row.id, at=at, act=act.value, state=row.state.value, revision=row.revision, wave=row.wave,
        by=by[:200], reason=reason, hosts=named or None,
    ))


@dataclass(frozen=True, slots=True)
class Transition:
    """One stored transition of a rollout (``_record``)."""

    id: int
    rollout: int
    at: datetime
    act: RolloutAct
    state: RolloutState
    revision: str
    wave: int
    by: str
    reason: str | None
    hosts: list[str] | None


def _transition(r: Any) -> Transition:
    return Transition(int(r["id"]), int(r["rollout"]), r["at"], RolloutAct(r["act"]), RolloutState(r["state"]),
                      r["revision"], int(r["wave"]), r["by"], r["reason"], r["hosts"])


def transitions(store: Store, rollouts_: Iterable[int]) -> dict[int, list[Transition]]:
    """Each of ``rollouts_``'s transitions, oldest first (one read)."""
    ids = list(rollouts_)
    if not ids:
        return {}
    out: dict[int, list[Transition]] = {i: [] for i in ids}
    with store.connect() as conn:
        for r in conn.execute(sa.select(rollout_events).where(rollout_events.c.rollout.in_(ids))
                              .order_by(rollout_events.c.id)).mappings():
            out[int(r["rollout"])].append(_transition(r))
    return out


def events(
    store: Store, *, since: datetime | None = None, until: datetime | None = None, act: str | None = None,
    state: str | None = None, rollout: int | None = None, before: tuple[datetime, int] | None = None,
    inclusive: bool = False, limit: int,
) -> list[Transition]:
    """Up to ``limit`` transitions of every rollout, newest first, strictly before ``before`` (its time and
    id; at that time when ``inclusive``, whatever the id), each filter exact."""
    ev = rollout_events
    query = sa.select(ev)
    if before is not None:
        at = sa.literal(before[0], ev.c.at.type)
        query = query.where(sa.or_(ev.c.at < at, ev.c.at == at) if inclusive
                            else sa.or_(ev.c.at < at, sa.and_(ev.c.at == at, ev.c.id < before[1])))
    if since is not None:
        query = query.where(ev.c.at >= sa.literal(since, ev.c.at.type))
    if until is not None:
        query = query.where(ev.c.at < sa.literal(until, ev.c.at.type))
    for column, value in ((ev.c.act, act), (ev.c.state, state), (ev.c.rollout, rollout)):
        if value is not None:
            query = query.where(column == value)
    with store.connect() as conn:
        return [_transition(r) for r in conn.execute(query.order_by(ev.c.at.desc(), ev.c.id.desc()).limit(limit)).mappings()]


def latest(store: Store) -> RolloutRow | None:
    """The rollout in force (the newest), or None before any: one read by the primary key."""
    with store.connect() as conn:
        return _latest(conn)


def _latest(conn: Connection) -> RolloutRow | None:
    found = conn.execute(sa.select(rollouts).order_by(rollouts.c.id.desc()).limit(1)).mappings().first()
    return None if found is None else _row(found)


def get(store: Store, rollout: int) -> RolloutRow | None:
    with store.connect() as conn:
        found = conn.execute(sa.select(rollouts).where(rollouts.c.id == rollout)).mappings().first()
    return None if found is None else _row(found)


def recent(store: Store, limit: int = 10) -> list[RolloutRow]:
    with store.connect() as conn:
        rows = conn.execute(sa.select(rollouts).order_by(rollouts.c.id.desc()).limit(limit)).mappings().all()
    return [_row(r) for r in rows]


# (revision, the known hosts with the group intake recorded for each) -> each host's (wave, group)
Planner = Callable[[str, Mapping[str, str]], dict[str, tuple[int, str]]]


class Behind(Exception):
    """The directory holds a revision the store has seen before the newer one it is to be rolled out over: an
    older copy of the fleet directory (a replica restarted on a lagging copy, a sync that has not reached it).
    Never rolled out; going back on purpose is a new revision (a revert commit, an edit)."""

    def __init__(self, revision: str, why: str, in_force: RolloutRow | None) -> None:
        self.revision, self.in_force = revision, in_force
        served = f"the hosts are served as rollout {in_force.id} says" if in_force else "no rollout starts from it"
        super().__init__(
            f"the fleet directory holds revision {revision}, {why}: not rolled out (a lagging copy of the "
            f"directory?); {served}. To go back to it, make it a new revision (a revert commit, an edit)"
        )


def put_back(current: RolloutRow | None, revision: str) -> bool:
    """Whether ``revision`` is the directory put back after an abort: the aborted rollout's previous revision,
    the one revision older than the one in force that may come back as it was."""
    return current is not None and current.state == ABORTED and current.previous == revision


def _behind(conn: Connection, revision: str, current: RolloutRow | None, descends: bool = False) -> str | None:
    """Why ``revision`` is behind the store's newest (``Behind``), else None. Behind: first seen before the
    revision in force (or, before any rollout, before the newest recorded one), or rolled out once already and
    left since; but an aborted rollout's previous revision may come back as it was (the directory put back).
    A revision the store has never seen cannot be told from a new one. ``descends``: git proves ``revision``
    descends from the one in force, so the order the store saw them in says nothing; only an abort of it
    still holds (an operator's decision, which a replica on an older copy must not undo)."""
    if put_back(current, revision):
        return None

    def seen(of: str | None = None) -> tuple[str, datetime] | None:
        query = sa.select(revisions.c.id, revisions.c.first_seen)
        query = query.where(revisions.c.id == of) if of else query.order_by(revisions.c.first_seen.desc())
        found = conn.execute(query.limit(1)).first()
        return None if found is None else (found[0], found[1])

    ours, theirs = seen(revision), seen(current.revision if current is not None else None)
    stamp = "%Y-%m-%d %H:%M:%S UTC"
    if not descends and ours is not None and theirs is not None and ours[1] < theirs[1]:
        return (f"first seen {ours[1]:{stamp}}, before revision {theirs[0]}"
                f"{f' of rollout {current.id} ({current.state})' if current else ''} (first seen {theirs[1]:{stamp}})")
    if current is not None:
        used = conn.execute(
            sa.select(rollouts.c.id, rollouts.c.state).where(rollouts.c.revision == revision)
            .order_by(rollouts.c.id.desc()).limit(1)
        ).first()
        if used is not None and (not descends or _aborted_since(conn, used[0])):
            return f"rolled out before (rollout {used[0]}, {used[1]}) and left since for revision {current.revision}"
    return None


def _aborted_since(conn: Connection, rollout: int) -> bool:
    """Whether ``rollout``, or one after it, was aborted: an operator's decision a descendant does not undo (a
    commit superseded by the one aborted is half of the change aborted)."""
    found = conn.execute(
        sa.select(rollouts.c.id).where(rollouts.c.id >= rollout, rollouts.c.state == ABORTED).limit(1)
    ).first()
    return found is not None


def begin(
    store: Store, revision: str, last_wave: int, planner: Planner, stale_after: float, after: str | None = None
) -> RolloutRow | None:
    """Start the rollout of ``revision`` when it is not the one in force; the new row, else None.

    The first revision ever is stable at once (``done``). Otherwise the rollout rolls from the last
    ``done`` revision, and supersedes the one under way; the previous revision of an aborted rollout
    (the directory put back after an abort) is ``done`` at once. A revision behind the store's newest is
    ``Behind`` (``_behind``): one replica on a lagging copy of the directory must not take the fleet back.
    Planned in waves: the hosts whose last pass ran a revision of the fleet (not ``datum apply
    --report-to`` alone) and that do not read ``unknown`` (silent past ``stale_after`` of their
    intervals): a host that will not report cannot hold a wave.

    Replicas begin at once: the one whose insert of the next id loses reads the store again, and finds its
    revision begun by the other (None), or begins it after the other's (superseding it), or Behind.

    ``after``: a revision git proves ``revision`` descends from (``datum.fleet.rollouts.machine``): while it is the one in
    force, ``revision`` is not behind it, whatever order the store first saw the two in.
    """
    for _ in range(RACES):
        try:
            return _begin(store, revision, last_wave, planner, stale_after, after)
        except _Raced:  # another replica took the next id, perhaps for another revision: read again
            continue
    raise RuntimeError(f"the rollout of revision {revision} lost {RACES} races in a row for the next id")


class _Raced(Exception):
    """Another replica inserted the rollout of the id ``_begin`` meant to take."""


RACES = 5  # times ``begin`` reads the store again after another replica took the id it meant to


def _begin(
    store: Store, revision: str, last_wave: int, planner: Planner, stale_after: float, after: str | None
) -> RolloutRow | None:
    insert = insert_for(store.dialect)
    with store.begin() as conn:
        current = _latest(conn)
        if current is not None and current.revision == revision:
            return None
        descends = after is not None and current is not None and current.revision == after
        why = _behind(conn, revision, current, descends)
        if why is not None:
            raise Behind(revision, why, current)
        now = store_now(conn)
        stable = conn.execute(
            sa.select(rollouts.c.revision).where(rollouts.c.state == DONE).order_by(rollouts.c.id.desc()).limit(1)
        ).scalar()
        done = stable is None or stable == revision
        new_id = 1 if current is None else current.id + 1
        values = dict(
            id=new_id, revision=revision, previous=stable, state=DONE if done else ROLLING,
            wave=last_wave if done else 0, last_wave=last_wave, started_at=now, wave_started_at=now,
            wave_completed_at=now if done else None, updated_at=now,
        )
        inserted = conn.execute(
            insert(rollouts).values(**values).on_conflict_do_nothing(index_elements=[rollouts.c.id]).returning(rollouts.c.id)
        ).first()  # RETURNING, not rowcount: psycopg says -1 for an INSERT ... ON CONFLICT
        if inserted is None:
            raise _Raced  # the transaction ends with nothing written; ours may still be to begin
        why = f"superseded by revision {revision}"
        for older in conn.execute(sa.select(rollouts).where(rollouts.c.id < new_id, rollouts.c.state.in_(OPEN))).mappings().all():
            gone = _update(conn, older["id"], rollouts.c.state == older["state"],
                           state=SUPERSEDED, updated_at=now, reason=why)
            if gone is not None:
                _record(conn, gone, RolloutAct.SUPERSEDED, now, reason=why)
        if not done:
            alive = host_state_at(store.dialect, stale_after, now) != "unknown"
            known = dict(conn.execute(sa.select(hosts.c.host, hosts.c.group_name).where(_REVISION.isnot(None), alive)).all())
            plan = planner(revision, known)
            rows = [{"rollout": new_id, "host": h, "wave": w, "grp": g} for h, (w, g) in plan.items()]
            for start in range(0, len(rows), 1000):
                conn.execute(sa.insert(rollout_hosts), rows[start:start + 1000])
        row = RolloutRow(**values, by=None, reason=None, failed=None)  # type: ignore[arg-type]
        _record(conn, row, RolloutAct.STARTED, now, reason=(
            f"from revision {stable}" if not done else
            "the first revision the store saw: stable at once" if stable is None else "the stable revision again"
        ))
        return row


def membership(
    store: Store, rollout: int, only: Iterable[str] | None = None, wave: int | None = None,
) -> dict[str, int]:
    """Each planned host's wave in ``rollout`` (hosts not listed wait for the last wave); of ``only`` when given,
    of ``wave`` alone when given (one range of ``ix_rollout_hosts_wave``)."""
    query = sa.select(rollout_hosts.c.host, rollout_hosts.c.wave).where(rollout_hosts.c.rollout == rollout)
    if only is not None:
        query = query.where(rollout_hosts.c.host.in_(list(only)))
    if wave is not None:
        query = query.where(rollout_hosts.c.wave == wave)
    with store.connect() as conn:
        return {h: int(w) for h, w in conn.execute(query)}


def wave_names(store: Store, rollout: int, waves: int, limit: int) -> dict[int, list[str]]:
    """The first ``limit`` hosts by name of each of ``rollout``'s waves 0..``waves`` (one index range each)."""
    out: dict[int, list[str]] = {}
    with store.connect() as conn:
        for wave in range(waves + 1):
            out[wave] = list(conn.execute(
                sa.select(rollout_hosts.c.host).where(rollout_hosts.c.rollout == rollout, rollout_hosts.c.wave == wave)
                .order_by(rollout_hosts.c.host).limit(limit)
            ).scalars())
    return out


@dataclass(frozen=True, slots=True)
class HeldBack:
    """A host kept on the previous revision by the rollout in force: its wave is not released yet."""

    rollout: int
    revision: str  # the one rolling out
    previous: str  # the one the host is served meanwhile
    wave: int  # the host's wave
    released: int  # the last wave released so far


def under_way(row: RolloutRow | None) -> bool:
    """Whether ``row`` (the rollout in force) may hold hosts back: rolling, paused or halted, from a previous
    revision. Callers ask it before reading the wave plan ``held_back`` needs."""
    return row is not None and row.state in OPEN and row.previous is not None


def held_back(row: RolloutRow | None, wave_of: Mapping[str, int], host: str, ran: str | None) -> HeldBack | None:
    """Whether ``row`` holds ``host`` back: a rollout under way (rolling, paused or halted), the host's wave not
    released (a host it did not plan waits for the last), and its last pass ran the previous revision. A host
    whose effective manifest is the same in both is served the new one at once (``datum.fleet.rollouts.serve``), so
    its next pass runs the new revision and it no longer reads held back."""
    if row is None or not under_way(row) or ran != row.previous:
        return None
    wave = wave_of.get(host, row.last_wave)
    if wave <= row.wave:
        return None
    return HeldBack(row.id, row.revision, row.previous, wave, row.wave)


def attention_of(store: Store, configured: bool) -> dict[str, Any] | None:
    """The rollout in force as ``datum.core.attention.decide`` reads it (its fields; a halted or paused one is a
    line of *Needs a human*), None without staged rollouts (``configured``) or a rollout. One read by primary key."""
    if not configured:
        return None
    from dataclasses import asdict

    row = latest(store)
    return None if row is None else asdict(row)


@dataclass(frozen=True, slots=True)
class WaveCount:
    wave: int
    hosts: int
    converged: int  # converged on the rollout's revision, and heard from
    failed: int  # failed on the rollout's revision, or silent since a pass on it
    silent: int = 0  # silent before any pass on it: not waited for
    accepted: int = 0  # failing with the pass a resume accepted: counted neither failed nor waited for


def wave_counts(store: Store, row: RolloutRow, stale_after: float) -> list[WaveCount]:
    """Per wave of ``row``'s plan: its hosts, how many converged, failed and fell silent (one grouped read)."""
    with store.connect() as conn:
        return _wave_counts(conn, row, store.dialect, stale_after, store_now(conn))


def _wave_counts(conn: Connection, row: RolloutRow, dialect: str, stale_after: float, now: datetime) -> list[WaveCount]:
    """A host that fell silent (``stale_after`` of its intervals without a report) before its last pass ran the
    new revision is not waited for: it takes the revision whenever it comes back, its wave released. So is a
    planned host that never reported at all (a canary named by hand, misspelt or not enrolled yet): it has no
    pass to judge. One that fell silent after a pass on it counts as failed: a revision that cuts a host off
    must halt the rollout, not be taken for a host that had nothing to say; unless a resume accepted that
    pass's failure (``accepted``), which then holds nothing until the host's next pass. A released host the
    revision could not be served to (``unserved``) counts failed when its manifest does not validate (until a
    resume accepts it), and is not waited for when the revision has none for it."""
    on_new = _REVISION == row.revision
    stale = silent(dialect, stale_after, now)
    not_on_new = sa.not_(sa.func.coalesce(on_new, sa.false()))
    lost = sa.or_(hosts.c.host.is_(None), stale, _LEFT)  # silent, never heard from, or not in the revision
    reads = host_state_at(dialect, stale_after, now)
    # not served the revision: until a pass on it says otherwise
    failing = sa.or_(sa.and_(on_new, sa.or_(stale, reads == "failed")), sa.and_(_BAD, not_on_new))
    accepted = sa.func.coalesce(_ACCEPTED, sa.false())
    taken = sa.or_(sa.and_(failing, accepted), sa.and_(_UNSERVED_ACCEPTED, not_on_new))  # what a resume accepted

    def count(*when: Any) -> Any:
        return sa.func.sum(sa.case((sa.and_(*when), 1), else_=0))

    query = (
        sa.select(
            rollout_hosts.c.wave, sa.func.count(),
            count(on_new, reads == "converged"),
            count(failing, sa.not_(accepted)),
            count(not_on_new, sa.not_(_BAD), sa.not_(_UNSERVED_ACCEPTED), lost),
            count(taken),
        )
        .select_from(rollout_hosts.outerjoin(hosts, hosts.c.host == rollout_hosts.c.host))
        .where(rollout_hosts.c.rollout == row.id)
        .group_by(rollout_hosts.c.wave)
        .order_by(rollout_hosts.c.wave)
    )
    return [
        WaveCount(int(w), int(n), int(c or 0), int(f or 0), int(s or 0), int(a or 0))
        for w, n, c, f, s, a in conn.execute(query)
    ]


def failed_hosts(conn: Connection, row: RolloutRow, dialect: str, stale_after: float, now: datetime,
                 limit: int = FAILED_KEPT) -> list[dict[str, Any]]:
    """The released hosts that failed on ``row``'s revision, fell silent since a pass on it, or could not be
    served it (``unserved``), with why."""
    stale = silent(dialect, stale_after, now)
    query = (
        sa.select(rollout_hosts.c.host, hosts.c.reason, hosts.c.state, hosts.c.finished_at, stale,
                  rollout_hosts.c.unserved_code, rollout_hosts.c.unserved, _REVISION)
        .select_from(rollout_hosts.outerjoin(hosts, hosts.c.host == rollout_hosts.c.host))
        .where(rollout_hosts.c.rollout == row.id, rollout_hosts.c.wave <= row.wave,
               sa.not_(sa.func.coalesce(_ACCEPTED, sa.false())),
               sa.or_(sa.and_(_REVISION == row.revision, sa.or_(stale, hosts.c.state == "failed")),
                      sa.and_(_BAD, sa.not_(sa.func.coalesce(_REVISION == row.revision, sa.false())))))
        .order_by(rollout_hosts.c.host)
        .limit(limit)
    )
    return [
        {"host": h, "reason": (
            f"not served: {why}" if code == UNSERVED_FAILED and ran != row.revision
            else _silent_since(state, at) if lost else (r or "failed")
        )}
        for h, r, state, at, lost, code, why, ran in conn.execute(query)
    ]


def unserved(store: Store, rollout: int, host: str, code: str, why: str) -> bool:
    """Record that ``rollout``'s revision could not be served to ``host``, released (``code``: ``UNSERVED_FAILED``,
    its manifest does not validate; ``UNSERVED_LEFT``, the revision has none for it), the first why kept;
    whether this call recorded it. A host that cannot take the revision would otherwise hold its wave for
    ever: it reports on what it has, never on the revision."""
    with store.begin() as conn:
        done = conn.execute(
            sa.update(rollout_hosts)
            .where(rollout_hosts.c.rollout == rollout, rollout_hosts.c.host == host, rollout_hosts.c.unserved_code.is_(None))
            .values(unserved=why[:1000], unserved_code=code)
        )
    return bool(done.rowcount)


def _silent_since(state: str, at: datetime | None) -> str:
    when = at.strftime("%Y-%m-%d %H:%M:%S UTC") if at is not None else "its last pass"
    return f"silent since {when}, after a pass on this revision ({state})"


def hosts_on(store: Store, revision: str, limit: int = 1000) -> list[str]:
    """The hosts whose last pass ran ``revision``, by name."""
    with store.connect() as conn:
        return [h for (h,) in conn.execute(
            sa.select(hosts.c.host).where(_REVISION == revision).order_by(hosts.c.host).limit(limit)
        )]


def check(store: Store, soak: timedelta, max_failed: float, stale_after: float) -> RolloutRow | None:
    """Advance or halt the rollout under way, as its hosts' last passes say; the row changed, else None.

    Halted: more than ``max_failed`` of the released hosts (waves up to the current) that count failed on
    the new revision (or fell silent after a pass on it). A released host silent since before any pass on
    it does not count and is not waited for (``_wave_counts``), nor does one whose failure a resume accepted
    (``command``); but when hosts were released, a wave completes only once one of them converged on the
    revision: canaries that all went silent tested nothing (accepted ones were looked at by a person), and the
    rollout is done only once one did. Else, once every counted host has its verdict on the revision
    (converged, or failed within ``max_failed``: what ``max_failed`` tolerates does not hold the rollout), the
    wave is complete (the soak starts); ``soak`` later the next wave is released; the last wave complete, the
    rollout is done. A released host that leaves its verdict before the soak ends restarts it.
    """
    with store.begin() as conn:
        row = _latest(conn)
        if row is not None and row.state == HALTED:
            _name_failed(conn, row, store.dialect, stale_after)
            return None
        if row is None or row.state != ROLLING:
            return None
        now = store_now(conn)
        released = [c for c in _wave_counts(conn, row, store.dialect, stale_after, now) if c.wave <= row.wave]
        planned = sum(c.hosts - c.accepted for c in released)  # a failure accepted was looked at, not untested
        total = planned - sum(c.silent for c in released)
        failed = sum(c.failed for c in released)
        converged = sum(c.converged for c in released)
        same = (row.id, rollouts.c.wave == row.wave, rollouts.c.state == ROLLING)
        if total and failed / total > max_failed:
            named = failed_hosts(conn, row, store.dialect, stale_after, now)
            reason = (f"{failed} of {total} released hosts failed on revision {row.revision} "
                      f"(more than max_failed {max_failed:.0%}): " + ", ".join(f["host"] for f in named[:10]))
            return _moved(conn, RolloutAct.HALTED, now, _update(conn, *same, state=HALTED, reason=reason, failed=named,
                                                                updated_at=now), reason, [f["host"] for f in named])
        last = row.wave >= row.last_wave  # done needs one host that converged: accepted failures tested nothing
        if converged + failed < total or ((planned or last) and not converged):
            if row.wave_completed_at is not None:
                return _update(conn, *same, wave_completed_at=None, updated_at=now)
            return None
        completed = row.wave_completed_at
        if completed is None:
            _update(conn, *same, wave_completed_at=now, updated_at=now)
            completed = now
        if last:
            return _moved(conn, RolloutAct.DONE, now, _update(conn, *same, state=DONE, updated_at=now),
                          f"every wave converged on revision {row.revision}")
        if completed + soak <= now:
            return _moved(conn, RolloutAct.RELEASED, now, _update(
                conn, *same, wave=row.wave + 1, wave_started_at=now, wave_completed_at=None, updated_at=now,
            ), f"wave {row.wave} converged and soaked {soak}" if soak else f"wave {row.wave} converged")
        return None


def _moved(conn: Connection, act: RolloutAct, at: datetime, row: RolloutRow | None, reason: str | None = None,
           named: list[str] | None = None, by: str = SERVER) -> RolloutRow | None:
    """``row`` as ``act`` left it, the act recorded (``_record``); None when another replica moved it first."""
    if row is not None:
        _record(conn, row, act, at, by, reason, named)
    return row


def _name_failed(conn: Connection, row: RolloutRow, dialect: str, stale_after: float) -> None:
    """A halted rollout names every released host failing on its revision now, not only those failing when it
    halted: one that fails a second later is named too (and a resume accepts only what was named)."""
    named = failed_hosts(conn, row, dialect, stale_after, store_now(conn))
    if named != (row.failed or []):
        conn.execute(sa.update(rollouts).where(rollouts.c.id == row.id, rollouts.c.state == HALTED).values(failed=named))


def _update(conn: Connection, rollout: int, *where: Any, **values: Any) -> RolloutRow | None:
    """Update rollout ``rollout`` where it still is as decided (``where``); it as it now is, else None."""
    done = conn.execute(sa.update(rollouts).where(rollouts.c.id == rollout, *where).values(**values))
    if done.rowcount != 1:
        return None
    found = conn.execute(sa.select(rollouts).where(rollouts.c.id == rollout)).mappings().first()
    return None if found is None else _row(found)


def command(
    store: Store, action: str, by: str, stale_after: float = 3.0, reason: str | None = None,
) -> tuple[RolloutRow | None, RolloutRow | None]:
    """``pause``, ``resume`` or ``abort`` the rollout in force: (it before, it after; None when its state
    does not allow the command). ``by`` and ``reason`` are stored with the transition (``_record``).

    Resuming a halted rollout accepts the failures it named (``failed``: every released host failing on its
    revision, or silent since a pass on it, as the last check found them, ``_name_failed``): each is
    ``accepted`` until its next pass, counted neither failed nor waited for, and the rollout goes on with the
    others; a pass received after the resume counts as before, failed anew or after converging, and so does a
    host that began failing after the list was made (never accepted unseen). The failure list is cleared.
    Without it, a resume would halt again at once while those hosts still fail, and the only ways on would be
    a new revision or an abort.
    """
    act = COMMANDS[action]
    with store.begin() as conn:
        row = _latest(conn)
        if row is None or row.state not in act.sources:
            audit.unchanged(conn)  # answered 404 or 409: the request's audit row goes with that
            return row, None
        now = store_now(conn)
        values: dict[str, Any] = {"state": act.target, "by": by, "updated_at": now}
        named = [str(f["host"]) for f in row.failed or []]
        if act is RolloutAct.RESUMED:
            values.update(reason=None, failed=None, wave_completed_at=None)
        if act is RolloutAct.RESUMED and row.state == HALTED:  # before the row: what it returns counts them accepted
            failing = sa.select(hosts.c.host).where(
                _REVISION == row.revision, sa.or_(silent(store.dialect, stale_after, now), hosts.c.state == "failed")
            )
            shown = sa.and_(rollout_hosts.c.rollout == row.id, rollout_hosts.c.wave <= row.wave,
                            rollout_hosts.c.host.in_(named))
            conn.execute(  # a revision that could not be served to a host: accepted until a newer revision
                sa.update(rollout_hosts)
                .where(shown, rollout_hosts.c.unserved_code == UNSERVED_FAILED)
                .values(unserved_code=UNSERVED_ACCEPTED)
            )
            conn.execute(
                sa.update(rollout_hosts)
                .where(shown, rollout_hosts.c.host.in_(failing))
                .values(accepted_at=sa.select(hosts.c.updated_at).where(hosts.c.host == rollout_hosts.c.host)
                        .scalar_subquery())  # the pass accepted, named by when it was received
            )
        elif act is RolloutAct.ABORTED:
            named = [h for (h,) in conn.execute(
                sa.select(hosts.c.host).where(_REVISION == row.revision).order_by(hosts.c.host).limit(FAILED_KEPT)
            )]
        else:
            named = []
        after = _moved(conn, act, now, _update(conn, row.id, rollouts.c.state == row.state,
                                                **values), reason, named, by)
        return row, after

"""The runner: executes ticks of registered reconcilers, one pass at a time per reconciler, whichever process ticks.

A tick *claims* the reconciler before it executes a pass, in this order:

1. this process's own lock (a predecessor in this process is still running);
2. the store's session lock (``datum.store.locks.session_lock``): released by
   the kernel or the database server when its process dies, so a pass killed
   by SIGKILL never holds the reconciler for a lease time. Held elsewhere, it
   is taken over only from a pass whose lease expired (``lock_ttl``, the
   claim's timeout: a hung process), which is then fenced out;
3. the ``locks`` lease (expiring; a running pass renews it, ``datum.reconcile.lease``);
4. the fencing token in the run row, raised by one (``take_claim``); a
   scheduled tick is refused there, by the store's clock, before
   ``lastRanAt + interval``.

A tick that cannot claim is *skipped*: it moves ``asOf`` and leaves
``lastRanAt`` and the items of the last executed pass untouched. A scheduled
tick that is not due yet is *not due*: nothing is written. Every write of a
pass (item memory, the run row, the reconciler's own writes through
``PassContext.begin``) first checks the token, so a pass that was overtaken
writes nothing and ends as ``lost-claim``.

Explicit passes (``datum reconcile NAME --passes N``) take the same claim but
not the interval: an operator asked for them now.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import StrEnum

import sqlalchemy as sa

from datum.config import ReconcilerSettings, Settings
from datum.core.converge import ItemReport, PassResult, retain
from datum.core.coverage import CoverageRow
from datum.core.rollup import reconciler_health
from datum.core.vocab import Health
from datum.reconcile.context import PassContext, PassStopped
from datum.reconcile.lease import PassLease
from datum.reconcile.registry import Reconciler, Registry
from datum.reconcile.result import Result
from datum.store import Store
from datum.store.history import record_reconciler_pass
from datum.store.locks import (
    SESSION_HOLDER,
    SessionLock,
    release,
    session_lock,
    take_expired,
    try_acquire,
)
from datum.store.memory import break_streaks, save_memory
from datum.store.runs import (
    COVERAGE,
    ITEMS_REPORTED,
    REQUEUE,
    LostClaim,
    NotDue,
    check_claim,
    load_run,
    raise_claim,
    record_executed,
    record_skipped,
    store_now,
    take_claim,
)

log = logging.getLogger("datum.runner")

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


class TickOutcome(StrEnum):
    EXECUTED = "executed"
    SKIPPED = "skipped"
    # A scheduled tick before lastRanAt + interval: nothing ran, nothing was written.
    NOT_DUE = "not-due"
    # The pass ran but another claimed the reconciler meanwhile: it wrote nothing.
    LOST_CLAIM = "lost-claim"


@dataclass(frozen=True)
class Tick:
    """What one tick did."""

    reconciler: str
    outcome: TickOutcome
    health: Health | None = None
    drift: int = 0
    blocked: int = 0
    reasons: dict[str, int] | None = None
    error: str | None = None
    # The pass was asked to stop and applied no further item (SIGTERM, shutdown).
    stopped: bool = False
    # NOT_DUE: seconds until the tick is due, by the store's clock.
    due_in: float | None = None


def item_json(item: ItemReport) -> dict[str, object]:
    """The stored form of one retained item."""
    out = asdict(item)
    out["direction"] = item.direction.value
    out["reason"] = item.reason.value
    return out


def _result(said: object) -> Result | None:
    """What ``run`` returned: nothing or a ``Result``; anything else is the reconciler's bug."""
    if said is None or isinstance(said, Result):
        return said
    raise TypeError(f"run() returned {type(said).__name__}, not a Result or None")


def metrics_json(
    results: list[PassResult], ctx: PassContext | None = None, requeue: int | None = None
) -> dict[str, object]:
    """The stored form of a pass's exact metric counts: every diverged item, not only the retained.

    ``{"items": {reason: {direction: n}}, "tripped": [direction, ...], "atBackoffCap": n}``:
    at most one number per reason and direction, whatever diverged. With the
    pass's context, also whether it reported items (``itemsReported``), the
    coverage a bespoke reconciler measured (``coverage``) and the requeue it
    asked for (``requeueAfterPasses``).
    """
    items: dict[str, dict[str, int]] = {}
    tripped: set[str] = set()
    for r in results:
        for (reason, direction), n in r.by_direction.items():
            if n > 0:
                per = items.setdefault(reason.value, {})
                per[direction.value] = per.get(direction.value, 0) + n
        tripped.update(d.value for d in r.tripped)
    out: dict[str, object] = {
        "items": items,
        "tripped": sorted(tripped),
        "atBackoffCap": sum(r.at_backoff_cap for r in results),
    }
    if ctx is not None:
        out[ITEMS_REPORTED] = ctx.items_reported
        if ctx.coverage is not None:
            out[COVERAGE] = [coverage_json(row) for row in ctx.coverage]
    if requeue is not None:
        out[REQUEUE] = requeue
    return out


def coverage_json(row: CoverageRow) -> dict[str, object]:
    """The stored form of one coverage row a bespoke reconciler reported."""
    return {
        "kind": row.kind,
        "status": row.status,
        "count": row.count,
        "selected": row.selected,
        "terminal": row.terminal,
        "owned_by": row.owned_by,
        "oldest_age_seconds": row.oldest_age_seconds,
    }


class _Claim:
    """The fencing token a pass holds; remembers when a write found it lost."""

    def __init__(self, reconciler: str, token: int) -> None:
        self.reconciler = reconciler
        self.token = token
        self.lost: LostClaim | None = None

    def fence(self, conn: sa.Connection) -> None:
        try:
            check_claim(conn, self.reconciler, self.token)
        except LostClaim as exc:
            self.lost = exc
            raise


def _session_bound(holder: str) -> bool:
    """A lease written by a runner that also held the session lock we now hold: it is dead."""
    return holder.startswith(SESSION_HOLDER)


class Runner:
    """Runs ticks for the reconcilers of one registry against one store.

    ``clock``: None (the default) reads the store's clock, shared by every
    runner on the store; a function gives deterministic time for tests.
    """

    def __init__(
        self, registry: Registry, settings: Settings, store: Store, clock: Clock | None = None
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.store = store
        self.clock = clock
        self.holder = f"{SESSION_HOLDER}{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._running: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _now(self) -> datetime:
        if self.clock is not None:
            return self.clock()
        with self.store.connect() as conn:
            return store_now(conn)

    def _local_lock(self, name: str) -> threading.Lock:
        with self._guard:
            return self._running.setdefault(name, threading.Lock())

    def tick(
        self,
        name: str,
        *,
        scheduled: bool = False,
        should_stop: Callable[[], bool] | None = None,
    ) -> Tick:
        """One tick of ``name``: execute a pass, or record it as skipped.

        ``scheduled``: a tick of the schedule, refused (``not-due``) before
        ``lastRanAt + interval``. ``should_stop``: once true, the pass finishes
        the item it is applying, applies no other, persists and releases.
        """
        reconciler, own = self.registry.build(self.settings, name, self.store)
        local = self._local_lock(name)
        if not local.acquire(blocking=False):
            return self._skip(name)
        try:
            session = session_lock(self.store, f"reconciler:{name}")
            if not session.try_acquire() and not self._take_over(name, own, session):
                return self._skip(name)
            try:
                return self._leased(name, reconciler, own, scheduled, should_stop, session)
            finally:
                session.release()
        finally:
            local.release()

    def _take_over(self, name: str, own: ReconcilerSettings, session: SessionLock) -> bool:
        """The session lock is held elsewhere: take the reconciler only from a pass whose claim timed out.

        One transaction takes the expired lease (one winner) and raises the claim
        token, so the timed-out pass can write nothing from then on; then its
        session lock is ended and taken. When it cannot be ended, the lease is
        kept until it expires, so that another tick tries again after ``lock_ttl``.
        """
        lease = f"reconciler:{name}"
        with self.store.begin() as conn:
            now = self.clock() if self.clock is not None else store_now(conn)
            if not take_expired(conn, lease, self.holder, now, own.lock_ttl):
                return False
            raise_claim(conn, name)
        log.warning("the claim on %s timed out (lock_ttl %s): taking the reconciler over", name, own.lock_ttl)
        try:
            session.break_held()
        except Exception as exc:  # noqa: BLE001 - e.g. a role not allowed to end the other's session
            # The lease stays ours until it expires: then the next taker tries again.
            log.warning("could not end the timed-out holder's lock on %s: %s", name, exc)
            return False
        if session.try_acquire():
            return True
        release(self.store, lease, self.holder)
        return False

    def _leased(
        self,
        name: str,
        reconciler: Reconciler,
        own: ReconcilerSettings,
        scheduled: bool,
        should_stop: Callable[[], bool] | None,
        session: SessionLock,
    ) -> Tick:
        lease = f"reconciler:{name}"
        takeover = _session_bound if session.dies_with_process else None
        taken_at = time.monotonic()
        if not try_acquire(self.store, lease, self.holder, self._now(), own.lock_ttl, takeover=takeover):
            return self._skip(name)
        kept = PassLease(self.store, lease, self.holder, own.lock_ttl, self._now, taken_at)
        try:
            try:
                with self.store.begin() as conn:
                    claimed = take_claim(
                        conn,
                        name,
                        None if self.clock is None else self.clock(),
                        own.interval if scheduled else None,
                    )
            except NotDue as exc:
                wait = (exc.due - exc.now).total_seconds()
                log.debug("tick of %s not due for %.3fs", name, wait)
                return Tick(name, TickOutcome.NOT_DUE, due_in=wait)
            claim = _Claim(name, claimed.token)
            return self._execute(name, reconciler, own, claimed.now, claim, should_stop, session, kept)
        finally:
            release(self.store, lease, self.holder)

    def _skip(self, name: str) -> Tick:
        with self.store.begin() as conn:
            now = self.clock() if self.clock is not None else store_now(conn)
            record_skipped(conn, name, now)
        log.info("tick of %s skipped: a pass is still running", name)
        return Tick(name, TickOutcome.SKIPPED)

    def _lost(self, name: str, exc: LostClaim) -> Tick:
        log.warning("%s", exc)
        return Tick(name, TickOutcome.LOST_CLAIM, error=str(exc))

    def _execute(
        self,
        name: str,
        reconciler: Reconciler,
        own: ReconcilerSettings,
        now: datetime,
        claim: _Claim,
        should_stop: Callable[[], bool] | None,
        session: SessionLock,
        lease: PassLease,
    ) -> Tick:
        with self.store.connect() as conn:
            previous = load_run(conn, name)
        first = previous is None or not previous.get("last_ran_at")
        why: list[str] = []
        overrun_at = time.monotonic() + own.overrun_after.total_seconds()

        def stopping() -> bool:
            """Checked before every apply: no further item once this is true."""
            if why or claim.lost is not None:
                return True
            if should_stop is not None and should_stop():
                why.append("the process was asked to stop")
            elif time.monotonic() > overrun_at:
                why.append(f"it ran past its pass_timeout ({own.overrun_after}); the rest waits for the next pass")
            elif (lapsed := lease.lapsed()) is not None:
                why.append(lapsed)
            elif not session.held():
                why.append("its session lock was lost (another pass may claim the reconciler)")
            return bool(why)

        ctx = PassContext(
            name, own, self.store, now, first_pass=first, fence=claim.fence, should_stop=stopping
        )
        started = time.perf_counter()
        error: str | None = None
        said: Result | None = None
        try:
            said = _result(reconciler.run(ctx))
        except LostClaim as exc:
            claim.lost = claim.lost or exc
        except PassStopped:
            pass
        except Exception as exc:  # noqa: BLE001 - a pass that cannot complete is `failing`
            error = str(exc) or type(exc).__name__
            log.warning("pass of %s could not complete: %s", name, error)
        if claim.lost is not None:
            # Even if the reconciler swallowed it: an overtaken pass writes nothing.
            return self._lost(name, claim.lost)
        if ctx.stopped and error is None:
            error = "stopped before the pass finished: " + (why[0] if why else "the process was asked to stop")
            log.warning("pass of %s %s", name, error)
        if error is None and said is not None and said.health is Health.FAILING:
            error = said.why
            log.warning("pass of %s says it is failing: %s", name, error)
        duration = time.perf_counter() - started
        results: list[PassResult] = ctx.results
        completed = error is None
        degrading = any(r.degrading for r in results)
        health = reconciler_health(executed=True, completed=completed, degrading=degrading)
        if completed and said is not None and said.health is Health.DEGRADED:
            health = Health.DEGRADED
            error = said.why
        if completed and ctx.borrowed:
            health = Health.DEGRADED
            borrowed = ", ".join(sorted(ctx.borrowed))
            error = "; ".join(filter(None, [error, f"reported reasons of other plugins ({borrowed}): shown as unexpected_value"]))
            log.warning("pass of %s %s", name, error)
        reasons: Counter[str] = Counter()
        for r in results:
            reasons.update({k.value: v for k, v in r.reasons.items()})
        values: dict[str, object] = {
            "as_of": now,
            "last_ran_at": now,
            "completed": completed,
            "error": error,
            "health": health.value,
            "duration_seconds": duration,
        }
        drift = sum(r.drift for r in results)
        blocked = sum(r.blocked for r in results)
        requeue = said.requeue_after if said is not None else None
        if completed:
            # A pass that could not complete keeps the last complete answer's items.
            kept, over = retain([i for r in results for i in r.items], own.drift_cap)
            values.update(
                drift=drift,
                blocked=blocked,
                dropped=sum(r.dropped for r in results) + over,
                items=[item_json(i) for i in kept],
                reasons=dict(reasons),
                metrics=metrics_json(results, ctx, requeue),
            )
        else:
            kept_metrics = dict((previous or {}).get("metrics") or {})
            kept_metrics.pop(REQUEUE, None)
            if requeue is not None:
                kept_metrics[REQUEUE] = requeue
            values["metrics"] = kept_metrics or None
        try:
            with self.store.begin() as conn:
                claim.fence(conn)
                for kind, memory in ctx.memories.items():
                    save_memory(conn, name, kind, memory)
                if not completed:
                    break_streaks(conn, name, ctx.memories.keys())
                record_executed(conn, name, values)
                # The pass's history row, fenced with it: an overtaken pass leaves no history either.
                record_reconciler_pass(conn, name, values, self.settings.server.history)
        except LostClaim as exc:
            return self._lost(name, exc)
        return Tick(
            name,
            TickOutcome.EXECUTED,
            health=health,
            drift=drift,
            blocked=blocked,
            reasons=dict(reasons),
            error=error,
            stopped=ctx.stopped,
        )

"""The runner: executes ticks of registered reconcilers, one at a time per reconciler.

A tick takes the reconciler's lease. A tick that cannot take it (another
process holds it, or this process's predecessor is still running) is
*skipped*: it moves ``asOf`` and leaves ``lastRanAt`` and the items of the last
executed pass untouched.
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

from datum.config import ReconcilerSettings, Settings
from datum.core.converge import ItemReport, PassResult, retain
from datum.core.rollup import reconciler_health
from datum.core.vocab import Health
from datum.reconcile.context import PassContext
from datum.reconcile.registry import Reconciler, Registry
from datum.store import Store
from datum.store.locks import release, try_acquire
from datum.store.memory import save_memory
from datum.store.runs import load_run, record_executed, record_skipped

log = logging.getLogger("datum.runner")

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


class TickOutcome(StrEnum):
    EXECUTED = "executed"
    SKIPPED = "skipped"


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


def item_json(item: ItemReport) -> dict[str, object]:
    """The stored form of one retained item."""
    out = asdict(item)
    out["direction"] = item.direction.value
    out["reason"] = item.reason.value
    return out


class Runner:
    """Runs ticks for the reconcilers of one registry against one store."""

    def __init__(
        self, registry: Registry, settings: Settings, store: Store, clock: Clock = utcnow
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.store = store
        self.clock = clock
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._running: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _local_lock(self, name: str) -> threading.Lock:
        with self._guard:
            return self._running.setdefault(name, threading.Lock())

    def tick(self, name: str) -> Tick:
        """One tick of ``name``: execute a pass, or record it as skipped."""
        reconciler, own = self.registry.build(self.settings, name, self.store)
        now = self.clock()
        local = self._local_lock(name)
        lease = f"reconciler:{name}"
        if not local.acquire(blocking=False):
            return self._skip(name, now)
        try:
            if not try_acquire(self.store, lease, self.holder, now, own.lock_ttl):
                return self._skip(name, now)
            try:
                return self._execute(name, reconciler, own, now)
            finally:
                release(self.store, lease, self.holder)
        finally:
            local.release()

    def _skip(self, name: str, now: datetime) -> Tick:
        with self.store.begin() as conn:
            record_skipped(conn, name, now)
        log.info("tick of %s skipped: a pass is still running", name)
        return Tick(name, TickOutcome.SKIPPED)

    def _execute(
        self, name: str, reconciler: Reconciler, own: ReconcilerSettings, now: datetime
    ) -> Tick:
        with self.store.connect() as conn:
            previous = load_run(conn, name)
        first = previous is None or not previous.get("last_ran_at")
        ctx = PassContext(name, own, self.store, now, first_pass=first)
        started = time.perf_counter()
        error: str | None = None
        try:
            reconciler.run(ctx)
        except Exception as exc:  # noqa: BLE001 - a pass that cannot complete is `failing`
            error = str(exc) or type(exc).__name__
            log.warning("pass of %s could not complete: %s", name, error)
        duration = time.perf_counter() - started
        results: list[PassResult] = ctx.results
        completed = error is None
        degrading = any(r.degrading for r in results)
        health = reconciler_health(executed=True, completed=completed, degrading=degrading)
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
        if completed:
            # A pass that could not complete keeps the last complete answer's items.
            kept, over = retain([i for r in results for i in r.items], own.drift_cap)
            values.update(
                drift=drift,
                blocked=blocked,
                dropped=sum(r.dropped for r in results) + over,
                items=[item_json(i) for i in kept],
                reasons=dict(reasons),
            )
        with self.store.begin() as conn:
            for kind, memory in ctx.memories.items():
                save_memory(conn, name, kind, memory)
            record_executed(conn, name, values)
        return Tick(
            name,
            TickOutcome.EXECUTED,
            health=health,
            drift=drift,
            blocked=blocked,
            reasons=dict(reasons),
            error=error,
        )

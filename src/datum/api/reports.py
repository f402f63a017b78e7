"""Drift reports as the API serves them: computed off the request path, serialized once.

Computing a report reads the reconciler's run row, validates its retained
items and runs the coverage query: ~10 ms with 500 items, which would cap the
endpoint at ~100 requests a second. So the server keeps each reconciler's last
report with its JSON body:

- none yet, or forgotten (this process ticked the reconciler or wrote its
  desired state, or any process recorded a tick of it: ``datum.api.watch``):
  the request waits for one computation, shared by every request that
  arrives meanwhile;
- older than ``ttl`` (default 1 s): the request gets it at once while one
  refresh runs in a worker thread, so under steady traffic a report is never
  older than ``ttl`` plus one computation, and no request waits on a refresh;
- older than ``4 × ttl`` (nobody asked for a while): the request waits for a
  new one, so a dashboard polling every 10 s never sees a 10-second-old report.

``ttl`` 0 turns the cache off (the tests use it to see every tick at once).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio.to_thread

from datum.reconcile.report import DriftReport

log = logging.getLogger("datum.api")

_STALE_FOR = 4  # a stale report is served while refreshing only up to this many ttl old


@dataclass(frozen=True)
class Cached:
    report: DriftReport
    body: bytes
    at: float


class ReportCache:
    """The last drift report of each reconciler, with its JSON body."""

    def __init__(self, compute: Callable[[str], DriftReport], ttl: float = 1.0) -> None:
        self._compute = compute
        self.ttl = ttl
        self._entries: dict[str, Cached] = {}
        self._generation: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._refreshing: dict[str, asyncio.Task[Cached]] = {}

    def _stale(self, entry: Cached) -> bool:
        return time.monotonic() - entry.at >= self.ttl

    def fresh(self, name: str) -> Cached | None:
        """The cached report if it is younger than ``ttl`` (never computes, never refreshes)."""
        entry = self._entries.get(name)
        return entry if entry is not None and not self._stale(entry) else None

    def current(self, name: str) -> Cached | None:
        """The cached report, fresh or stale; a stale one starts a refresh. Call on the event loop.

        With ``ttl`` 0 nothing is cached: None, so every request computes its own.
        """
        entry = self._entries.get(name) if self.ttl > 0 else None
        if entry is None:
            return None
        age = time.monotonic() - entry.at
        if age >= self.ttl * _STALE_FOR:
            return None  # nobody asked for a while: compute rather than show something old
        if age >= self.ttl:
            self._refresh_soon(name)
        return entry

    async def get(self, name: str) -> Cached:
        """The report of ``name``: cached, or computed now when there is none."""
        entry = self.current(name)
        return entry if entry is not None else await self._refresh(name)

    def get_sync(self, name: str) -> Cached:
        """For callers on a worker thread (the metrics collector): cached if fresh, else computed here."""
        entry = self.fresh(name)
        if entry is None:
            entry = self._store(name, self._generation.get(name, 0), self._build(name))
        return entry

    def invalidate(self, name: str | None = None) -> None:
        """Forget one reconciler's report, or all of them: the next request waits for a new one."""
        for n in [name] if name is not None else list(self._entries):
            self._generation[n] = self._generation.get(n, 0) + 1
            self._entries.pop(n, None)

    def _refresh_soon(self, name: str) -> None:
        if name in self._refreshing:
            return
        task = asyncio.get_running_loop().create_task(self._refresh(name))
        self._refreshing[name] = task
        task.add_done_callback(lambda t: self._refreshed(name, t))

    def _refreshed(self, name: str, task: asyncio.Task[Cached]) -> None:
        self._refreshing.pop(name, None)
        if not task.cancelled() and task.exception() is not None:
            log.warning("refreshing the drift report of %s failed: %s", name, task.exception())

    async def _refresh(self, name: str) -> Cached:
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            entry = self.fresh(name)  # computed while this request waited for the lock
            if entry is None:
                generation = self._generation.get(name, 0)
                built = await anyio.to_thread.run_sync(self._build, name)
                entry = self._store(name, generation, built)
            return entry

    def _store(self, name: str, generation: int, entry: Cached) -> Cached:
        # A report computed across an invalidation may predate the change: serve it once, keep it not.
        if self._generation.get(name, 0) == generation:
            self._entries[name] = entry
        return entry

    def _build(self, name: str) -> Cached:
        started = time.monotonic()
        report = self._compute(name)
        body = report.model_dump_json(by_alias=True, exclude_none=True).encode()
        return Cached(report, body, started)

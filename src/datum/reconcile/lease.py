"""The claim's timeout: a pass keeps its reconciler's lease by renewing it, and stops once it could not.

A pass holds the ``reconciler:NAME`` lease (``datum.store.locks``) for
``lock_ttl`` from the moment it was taken. Before every apply the pass asks
``PassLease.lapsed()``: a third of ``lock_ttl`` after the last renewal it
renews; once ``lock_ttl`` has passed since the last renewal began (by this
process's monotonic clock, which started before the store computed the
expiry), or the lease is someone else's, the pass applies no further item.
So a pass hung for longer than ``lock_ttl`` (stopped, stuck in one apply or in
reading its substrate) may be taken over by another process, and when it
wakes it applies nothing more; its writes are fenced by the claim token the
taker raised.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from datum.store import Store
from datum.store.locks import renew

log = logging.getLogger("datum.runner")


class PassLease:
    """The lease a running pass holds: ``lapsed()`` renews it, or says why the pass must stop."""

    def __init__(
        self,
        store: Store,
        name: str,
        holder: str,
        ttl: timedelta,
        now: Callable[[], datetime],
        taken_at: float,
    ) -> None:
        self.store = store
        self.name = name
        self.holder = holder
        self.ttl = ttl
        self._now = now
        self._renewed = taken_at  # monotonic, read before the store computed the expiry
        self._monotonic = time.monotonic

    @property
    def deadline(self) -> float:
        """When (monotonic) the lease may have expired by the store's clock."""
        return self._renewed + self.ttl.total_seconds()

    def lapsed(self) -> str | None:
        """None while the pass may go on applying (renewing when due); else why it may not."""
        started = self._monotonic()
        if started >= self.deadline:
            return f"its claim timed out (lock_ttl {self.ttl}; another process may have taken it over)"
        if started - self._renewed < self.ttl.total_seconds() / 3:
            return None
        try:
            kept = renew(self.store, self.name, self.holder, self._now(), self.ttl)
        except Exception as exc:  # noqa: BLE001 - not renewed: the deadline still holds
            log.warning("renewing the claim on %s failed: %s", self.name, exc)
            return None
        if not kept:
            return "its claim was taken over by another process (lock_ttl passed)"
        self._renewed = started
        return None

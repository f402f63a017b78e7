"""The labels hosts were given at enrollment, as a server holds them for the requests of every host.

``datum enroll create --label role=db`` keeps labels with the join token; every
host enrolled with it has them in its identity (``datum.fleet.enroll``), and
``nodes.yaml`` matches on them as on its own ``labels:`` (which have the last
word): the server's say, like the host's name, never the facts its agent sends.
The manifest route and the intake read them here, from memory: ``refresh`` (a
thread of the server, every ``FRESH`` seconds) reads the identities changed since
the last read (``changed_at``, from ``SKEW`` before the newest seen: another
replica's clock may be behind), and every ``WHOLE`` seconds the labels of every
active identity that has some, swapped in whole; the queries are the store's
(``datum.store.identities``), which the reboot leases ask directly. A
host enrolled, approved, denied or revoked is classified by what the store says
within ``FRESH`` seconds; a forgotten one (its sessions end with it) within
``WHOLE``. Memory and the store's work follow the hosts that have labels, not
the hosts that ask: a request never reads the store for them (reading per host
cost 4.7 KiB per held long poll over TLS, docs/performance.md). Before the
first refresh, or when the last is older than ``TRUST`` (no thread: an app
without ``datum serve``'s lifespan), ``of`` refreshes first.

The thread is its own (``datum.api.server``), not the token recheck's or the host groups' (the other loops
of 2 s): those bound how soon a revoked token, or a host moved out of a scoped token's groups, is refused. In
one loop the read of every labelled identity (each ``WHOLE`` seconds) would delay them, and an error that
ends one poll's thread would end theirs; a thread asleep between reads costs no CPU and no request any work.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from datum.store import Store, identities

log = logging.getLogger("datum.fleet")

FRESH = 2.0
WHOLE = 60.0
SKEW = timedelta(seconds=60)
TRUST = 30.0
NONE: dict[str, str] = {}


class EnrolledLabels:
    """Host name -> the labels it was given at enrollment ({}: none, or not an active enrolled host)."""

    def __init__(self, store: Callable[[], Store | None], clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._clock = clock
        self._known: dict[str, dict[str, str]] | None = None
        self._read_at = -TRUST
        self._whole_at = -WHOLE
        self._newest: datetime | None = None  # the newest changed_at read
        self._lock = threading.Lock()  # one refresh at a time; readers take the dict swapped in

    def remembered(self, host: str) -> dict[str, str] | None:
        """The labels from memory only (None: not read lately): for the event loop, which must not wait on the store."""
        known = self._known
        if known is None or self._read_at + TRUST < self._clock():
            return None
        return known.get(host, NONE)

    def of(self, host: str) -> dict[str, str]:
        """The labels of ``host``: from memory, else after reading them all (blocking); none without a store."""
        found = self.remembered(host)
        if found is not None:
            return found
        self.refresh()
        return (self._known or NONE).get(host, NONE)

    def refresh(self) -> None:
        """Read the identities changed lately (all of them every ``WHOLE`` seconds, ``datum.store.identities``);
        a store fault keeps what was read, and the next refresh tries again."""
        store = self._store()
        if store is None:
            return
        with self._lock:
            began = self._clock()
            whole = self._known is None or self._newest is None or began - self._whole_at >= WHOLE
            try:
                if whole:
                    rows = identities.labelled(store)
                else:
                    assert self._newest is not None
                    rows = identities.changed_since(store, self._newest - SKEW)
                newest = max((row.changed_at for row in rows), default=None)
                if newest is None and whole and self._newest is None:
                    newest = identities.newest_change(store)  # none labelled yet: changes are read from the newest identity's
            except Exception as exc:  # noqa: BLE001 - the next refresh tries again
                log.warning("reading the labels hosts were given at enrollment failed: %s", exc)
                return
            known = {} if whole else dict(self._known or {})
            for row in rows:
                if row.labels:
                    known[row.host] = row.labels
                else:
                    known.pop(row.host, None)
            if newest is not None and (self._newest is None or newest > self._newest):
                self._newest = newest
            self._known = known
            self._read_at = began
            if whole:
                self._whole_at = began

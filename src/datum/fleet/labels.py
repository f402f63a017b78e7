"""The labels hosts were given at enrollment, as a server holds them for the requests of every host.

``datum enroll create --label role=db`` keeps labels with the join token; every
host enrolled with it has them in its identity (``datum.fleet.enroll``), and
``nodes.yaml`` matches on them as on its own ``labels:`` (which have the last
word): the server's say, like the host's name, never the facts its agent sends.
The manifest route, the intake and the reboot leases read them here, from
memory: ``refresh`` (a thread of the server, every ``FRESH`` seconds) reads the
identities changed since the last read (``changed_at``, from ``SKEW`` before the
newest seen: another replica's clock may be behind), and every ``WHOLE``
seconds the labels of every active identity that has some, swapped in whole. A
host enrolled, approved, denied or revoked is classified by what the store says
within ``FRESH`` seconds; a forgotten one (its sessions end with it) within
``WHOLE``. Memory and the store's work follow the hosts that have labels, not
the hosts that ask: a request never reads the store for them (reading per host
cost 4.7 KiB per held long poll over TLS, docs/performance.md). Before the
first refresh, or when the last is older than ``TRUST`` (no thread: an app
without ``datum serve``'s lifespan), ``of`` refreshes first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import sqlalchemy as sa

from datum.store import Store
from datum.store.schema import host_identities

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
        """Read the identities changed lately (all of them every ``WHOLE`` seconds); a store fault keeps what was
        read, and the next refresh tries again."""
        from datum.fleet.enroll import ACTIVE, labels_in

        store = self._store()
        if store is None:
            return
        with self._lock:
            began = self._clock()
            whole = self._known is None or self._newest is None or began - self._whole_at >= WHOLE
            query = sa.select(host_identities.c.host, host_identities.c.state, host_identities.c.labels,
                              host_identities.c.changed_at)
            if whole:
                query = query.where(host_identities.c.state == ACTIVE, host_identities.c.labels.is_not(None))
            else:
                assert self._newest is not None
                query = query.where(host_identities.c.changed_at >= self._newest - SKEW)
            try:
                with store.connect() as conn:
                    rows = conn.execute(query).all()
            except Exception as exc:  # noqa: BLE001 - the next refresh tries again
                log.warning("reading the labels hosts were given at enrollment failed: %s", exc)
                return
            known = {} if whole else dict(self._known or {})
            for host, state, text, _changed in rows:
                labels = labels_in(text) if state == ACTIVE else NONE
                if labels:
                    known[host] = labels
                else:
                    known.pop(host, None)
            newest = max((row.changed_at for row in rows), default=None)
            if newest is not None and (self._newest is None or newest > self._newest):
                self._newest = newest
            elif whole and self._newest is None:
                with store.connect() as conn:  # none labelled yet: changes are read from the newest identity's time
                    self._newest = conn.execute(sa.select(sa.func.max(host_identities.c.changed_at))).scalar()
            self._known = known
            self._read_at = began
            if whole:
                self._whole_at = began

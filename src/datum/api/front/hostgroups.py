"""Each host's group as the server recorded it (``hosts.group_name``), for decisions of tokens scoped to groups.

A token scoped to host groups (``datum token create --group web``) may read and act on a host only when the
host is in one of them: Cedar is told ``Host::"web1" in HostGroup::"web"``. The group is the one the store
holds for the host (what the intake recorded, what every list filters by in its query), never what a request
says. A host the store does not know is in no group, so a scoped token is refused on it.

A host's group, once read, is remembered, as the token book remembers tokens: a thread of the server
(``revalidate``, every ``FRESH`` seconds, started with the app's lifespan) reads the groups of every
remembered host in one query, so a host moved to another group is seen within ``FRESH`` seconds and a
request never waits on the store for a host it asked about before. An entry the thread has not confirmed
for ``TRUST`` seconds (no thread: an app without ``datum serve``'s lifespan, or the store not answering)
is read again with its request. Hosts not asked about for ``IDLE`` seconds are forgotten; at most ``MOST``
are remembered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import sqlalchemy as sa

from datum.store import Store
from datum.store.schema import hosts

log = logging.getLogger("datum.api")

FRESH = 2.0
TRUST = 30.0
IDLE = 600.0
MOST = 100_000
_BATCH = 1000  # hosts per query of a revalidation


class HostGroups:
    """Host name -> its recorded group (None: the store does not know the host)."""

    def __init__(self, store: Callable[[], Store | None], clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._clock = clock
        # host -> (group, when the store last said so); host -> when it was last asked about
        self._seen: dict[str, tuple[str | None, float]] = {}
        self._used: dict[str, float] = {}
        self._lock = threading.Lock()  # writers only: remembered() reads without it

    def remembered(self, host: str) -> tuple[bool, str | None]:
        """(known, group) from memory only: for the event loop, which must not wait on the store."""
        hit = self._seen.get(host)
        now = self._clock()
        if hit is None or hit[1] + TRUST < now:
            return False, None
        self._used[host] = now
        return True, hit[0]

    def of(self, host: str) -> str | None:
        """``host``'s recorded group: from memory, else the store (blocking)."""
        known, group = self.remembered(host)
        if known:
            return group
        store = self._store()
        if store is None:
            return None
        with store.connect() as conn:
            group = conn.execute(sa.select(hosts.c.group_name).where(hosts.c.host == host)).scalar_one_or_none()
        now = self._clock()
        with self._lock:
            if len(self._seen) >= MOST:
                self._seen.clear()
                self._used.clear()
            self._seen[host] = (group, now)
            self._used[host] = now
        return group

    def revalidate(self) -> None:
        """Read the group of every remembered host again (a query per ``_BATCH`` hosts); forget idle ones. A
        store fault keeps memory as it is, each entry trusted ``TRUST`` seconds after it was last read."""
        store = self._store()
        if store is None:
            return
        now = self._clock()
        used = self._used.copy()
        with self._lock:
            for name in [h for h in self._seen if used.get(h, now) + IDLE < now]:
                self._seen.pop(name, None)
                self._used.pop(name, None)
        asked = list(self._seen)
        try:
            found: dict[str, str] = {}
            with store.connect() as conn:
                for start in range(0, len(asked), _BATCH):
                    part = asked[start:start + _BATCH]
                    found.update(conn.execute(
                        sa.select(hosts.c.host, hosts.c.group_name).where(hosts.c.host.in_(part))
                    ).tuples().all())
        except Exception as exc:  # noqa: BLE001 - a store fault keeps memory; retried at the next round
            log.debug("reading the hosts' groups again failed (kept as they are): %s", exc)
            return
        with self._lock:
            for name in asked:
                if name in self._seen:
                    self._seen[name] = (found.get(name), now)

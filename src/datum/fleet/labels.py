"""The labels each host was given at enrollment, as a server remembers them between the host's requests.

``datum enroll create --label role=db`` keeps labels with the join token; every
host enrolled with it has them in its identity (``datum.fleet.enroll``), and
``nodes.yaml`` matches on them as on its own ``labels:`` (which have the last
word): the server's say, like the host's name, never the facts its agent sends.
The manifest route, the intake and the reboot leases read them here: from
memory (``remembered``, for the event loop) or the store (``of``, blocking),
each read trusted ``FRESH`` seconds, so a host forgotten, revoked or enrolled
again is classified by what the store says within that. At most ``MOST``
hosts are remembered.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from datum.store import Store

FRESH = 10.0
MOST = 100_000
NONE: dict[str, str] = {}


class EnrolledLabels:
    """Host name -> the labels it was given at enrollment ({}: none, or not an active enrolled host)."""

    def __init__(self, store: Callable[[], Store | None], clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._clock = clock
        self._seen: dict[str, tuple[dict[str, str], float]] = {}
        self._lock = threading.Lock()  # writers only: remembered() reads without it

    def remembered(self, host: str) -> dict[str, str] | None:
        """The labels from memory only (None: not read lately): for the event loop, which must not wait on the store."""
        hit = self._seen.get(host)
        if hit is None or hit[1] + FRESH < self._clock():
            return None
        return hit[0]

    def of(self, host: str) -> dict[str, str]:
        """The labels of ``host``: from memory, else the store (blocking); none when the server has no store."""
        from datum.fleet.enroll import enrolled_labels

        known = self.remembered(host)
        if known is not None:
            return known
        store = self._store()
        if store is None:
            return NONE
        labels = enrolled_labels(store, host) or NONE
        with self._lock:
            if len(self._seen) >= MOST:
                self._seen.clear()
            self._seen[host] = (labels, self._clock())
        return labels

"""The server's background checks against the store: moved reconciler versions, and revoked tokens.

Several ``datum serve`` on one store each keep their reports in memory
(``datum.api.reports``). A thread of each reads every reconciler's version
(``datum.store.runs.versions``: one small query) every ``period`` seconds and
forgets the report of each one whose version moved, so every replica answers a
pass's report within ``period`` plus one computation of it, however long
``report_ttl`` is; requests between passes are still answered from memory. A
store that does not answer is retried at the next period; once it answers
again every report is forgotten (a tick may have been missed meanwhile).

The same kind of thread checks the tokens the server remembers against the
store every ``datum.api.front.tokens.RECHECK`` seconds (``TokenBook.revalidate``).
Both start and stop with the app's lifespan (``datum.api.server``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from datum.store import Store
from datum.store.runs import versions

log = logging.getLogger("datum.api")

# How often the versions are read: well inside the second a replica may lag a pass.
PERIOD = 0.2


class Every:
    """Calls ``poll()`` on a daemon thread of its own every ``period`` seconds, the first time at once; a
    callable ``period`` says before each wait how long the next one is; ``wake()`` ends the wait at once,
    ``wake(within)`` at the latest ``within`` seconds from now."""

    def __init__(self, poll: Callable[[], None], period: float | Callable[[], float], name: str) -> None:
        self.poll = poll
        self.period = period
        self.name = name
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._due = math.inf  # the monotonic time ``wake(within)`` asked the next poll by
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Poll from now on (never on the caller's thread)."""
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        self.poll()
        while not self._stop.is_set():
            until = time.monotonic() + (self.period() if callable(self.period) else self.period)
            while not self._stop.is_set():
                with self._lock:
                    left = min(until, self._due) - time.monotonic()
                    if left <= 0:
                        self._due = math.inf  # asked again during the poll: polled again after it
                        break
                self._wake.wait(left)
                self._wake.clear()
            if self._stop.is_set():
                break
            self.poll()

    def wake(self, within: float = 0.0) -> None:
        """Poll now (or at the latest ``within`` seconds from now), not at the end of the wait."""
        with self._lock:
            self._due = min(self._due, time.monotonic() + within)
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None


class RunWatch(Every):
    """Calls ``changed(name)`` for each reconciler whose version moved, ``changed(None)`` for all."""

    def __init__(
        self, store: Store, changed: Callable[[str | None], None], period: float = PERIOD
    ) -> None:
        super().__init__(self.read, period, "run-watch")
        self.store = store
        self.changed = changed
        self._seen: dict[str, int] | None = None

    def read(self) -> None:
        """Read the versions once and report what moved since the last read (all, on the first)."""
        try:
            with self.store.connect() as conn:
                now = versions(conn)
        except Exception as exc:  # noqa: BLE001 - a store fault is retried, never ends the watch
            log.debug("reading reconciler versions failed: %s", exc)
            self._seen = None
            return
        seen, self._seen = self._seen, now
        if seen is None:
            self.changed(None)
            return
        for name, version in now.items():
            if seen.get(name) != version:
                self.changed(name)

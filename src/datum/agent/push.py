"""Between passes, the agent waits for its manifest to change: a long poll, held on a thread of its own.

``Waiter`` asks ``GET /v1/hosts/{host}/manifest?wait=N`` with the digest of
the manifest the agent has (``If-None-Match``) until the next scheduled pass:

- the server answers 200 with another manifest: the change is handed to the
  loop (``changed``), which starts a pass after a random part of
  ``min(splay, JITTER)`` seconds (a fleet woken by one change does not
  converge on one second) and applies that manifest without asking again;
- a 304 that says ``Datum-Wait`` (the server held the wait): asked again;
- an answer without ``Datum-Wait`` (a server that does not hold waits): no
  more asking until the next pass, which runs on the interval as before;
- anything else (cannot reach, an error, a connection dropped): asked again
  after a backoff (``BACKOFF`` doubling to ``BACKOFF_MAX``, a random half of
  it), so a restarting server is not hammered and the push comes back once it
  is up; the interval's pass runs whatever happens.

A thread, so that SIGTERM and SIGHUP reach the loop at once while a wait is
held (the main thread waits on an event, never on a socket). It is a daemon:
it holds nothing the process must finish.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from datum.agent.fetch import Fetched

WAIT = 300  # seconds each wait asks (the server's and any proxy's idle timeout must be longer); 120 cost 7% of a core idle at 10,000 agents (docs/performance.md)
JITTER = 10.0  # at most this many seconds between a change and the pass it starts (and at most the splay)
BACKOFF = 5.0  # seconds before asking again after a failed wait, doubling
BACKOFF_MAX = 300.0

Ask = Callable[[int], Fetched]  # one wait of that many seconds


class Waiter:
    """Holds waits until the monotonic time ``until``; sets ``wake`` when the manifest changed."""

    def __init__(self, ask: Ask, etag: str, until: float, wake: threading.Event) -> None:
        self.ask = ask
        self.etag = etag
        self.until = until
        self.wake = wake
        self.changed: Fetched | None = None  # the changed manifest, as the server sent it
        self.why: str | None = None  # why it stopped waiting before ``until`` (falls back to the interval)
        self.asked = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="manifest-wait", daemon=True)

    def start(self) -> Waiter:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask no more (a wait in flight ends at its own time; its answer is dropped)."""
        self._stop.set()

    def _run(self) -> None:
        backoff = BACKOFF
        while not self._stop.is_set():
            left = self.until - time.monotonic()
            if left < 1:
                return
            self.asked += 1
            began = time.monotonic()
            got = self.ask(int(min(WAIT, left)))
            if self._stop.is_set():
                return
            if got.why is None and got.body is not None and got.digest != self.etag:
                self.changed = got
                self.wake.set()
                return
            if got.why is None and not got.held:
                self.why = "the server does not hold waits"
                return
            if got.why is None:  # held, and unchanged: asked again, never more than once a second
                backoff = BACKOFF
                if self._stop.wait(max(0.0, began + 1 - time.monotonic())):
                    return
                continue
            if self._stop.wait(random.uniform(backoff / 2, backoff)):
                return
            backoff = min(backoff * 2, BACKOFF_MAX)

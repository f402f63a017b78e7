"""Periodic ticks: one thread per enabled reconciler, ticking at its configured ``interval``.

The scheduler only decides *when*; the runner decides whether a tick executes
or is skipped (lease held elsewhere, predecessor still running). Intervals
are measured from the start of each tick, so a slow pass delays the next tick
rather than stacking ticks up; a pass that overruns its interval makes the
next tick start at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from datum.reconcile.runner import Runner, Tick

log = logging.getLogger("datum.scheduler")

OnTick = Callable[[Tick], None]


class Scheduler:
    """Ticks every enabled reconciler of ``runner``'s registry until stopped."""

    def __init__(self, runner: Runner, on_tick: OnTick | None = None) -> None:
        self.runner = runner
        self.on_tick = on_tick
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def names(self) -> list[str]:
        """The reconcilers this scheduler ticks: every registered one that is enabled."""
        r = self.runner
        return [n for n in r.registry if r.registry.settings(r.settings, n).enabled]

    def start(self) -> None:
        for name in self.names():
            interval = self.runner.registry.settings(self.runner.settings, name).interval
            t = threading.Thread(
                target=self._loop, args=(name, interval.total_seconds()), name=f"tick-{name}", daemon=True
            )
            t.start()
            self._threads.append(t)
            log.info("ticking %s every %ss", name, interval.total_seconds())

    def _loop(self, name: str, interval: float) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                tick = self.runner.tick(name)
            except Exception:  # noqa: BLE001 - one failed tick must not end the schedule
                log.exception("tick of %s raised", name)
            else:
                if self.on_tick is not None:
                    self.on_tick(tick)
            self._stop.wait(max(0.0, interval - (time.monotonic() - started)))

    def stop(self, timeout: float = 10.0) -> None:
        """Stop ticking; waits for running passes up to ``timeout`` seconds."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
        self._threads.clear()

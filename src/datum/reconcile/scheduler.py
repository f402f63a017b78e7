"""Periodic ticks: one thread per enabled reconciler, ticking at its configured ``interval``.

The scheduler only decides *when* to try; the runner decides whether a tick
executes or is skipped (claim held elsewhere, predecessor still running) and,
by the store's clock, whether it is due at all: with several processes
ticking one store (two ``datum serve``), a tick before ``lastRanAt +
interval`` is *not due*, is not reported, and is tried again when due.
Intervals are measured from the start of each tick, so a slow pass delays the
next tick rather than stacking ticks up; a pass that overruns its interval
makes the next tick start at once.

``stop`` asks a running pass to finish the item it is applying, persist and
release its claim (what ``datum serve`` does on SIGTERM), then waits for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from datum.config import Settings
from datum.reconcile.registry import Registry
from datum.reconcile.runner import Runner, Tick, TickOutcome

log = logging.getLogger("datum.scheduler")

OnTick = Callable[[Tick], None]

# A not-due tick is retried this long after it is due, so that clocks read a
# moment apart never make it early twice.
_SLACK = 0.01


def ticking(registry: Registry, settings: Settings) -> list[str]:
    """The reconcilers a scheduler ticks: every registered one that is enabled."""
    return [n for n in registry if registry.settings(settings, n).enabled]


class Scheduler:
    """Ticks every enabled reconciler of ``runner``'s registry until stopped."""

    def __init__(self, runner: Runner, on_tick: OnTick | None = None) -> None:
        self.runner = runner
        self.on_tick = on_tick
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def names(self) -> list[str]:
        """The reconcilers this scheduler ticks: every registered one that is enabled."""
        return ticking(self.runner.registry, self.runner.settings)

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
                tick = self.runner.tick(name, scheduled=True, should_stop=self._stop.is_set)
            except Exception:  # noqa: BLE001 - one failed tick must not end the schedule
                log.exception("tick of %s raised", name)
            else:
                if tick.outcome is TickOutcome.NOT_DUE:
                    # Another process ran it lately: try again when it is due.
                    self._stop.wait(min(interval, max(0.0, tick.due_in or 0.0)) + _SLACK)
                    continue
                if self.on_tick is not None:
                    self.on_tick(tick)
            self._stop.wait(max(0.0, interval - (time.monotonic() - started)))

    def stop(self, timeout: float = 10.0) -> None:
        """Stop ticking: a running pass finishes its current item, persists and releases.

        Waits for running passes up to ``timeout`` seconds.
        """
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
        self._threads.clear()

"""Stop after the current item: a signal asks ``datum reconcile`` to stop, it does not kill it.

Outside the main thread no handler can be installed: the block runs without one.
A host pass watches its signals the same way with ``datum.host.lock.Watch``,
which starts cold with the idle pass.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


class Stop:
    """Set by the first signal: its name, or None while none came."""

    def __init__(self) -> None:
        self.signal: str | None = None

    def is_set(self) -> bool:
        return self.signal is not None


@contextmanager
def stop_on(*signums: int) -> Iterator[Stop]:
    """While the block runs, ``signums`` set the yielded ``Stop``; the handlers before are put back after."""
    stop = Stop()

    def handler(signum: int, _frame: FrameType | None) -> None:
        stop.signal = signal.Signals(signum).name

    before: dict[int, Any] = {}
    try:
        for sig in signums:
            before[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread: no handler can be installed
        pass
    try:
        yield stop
    finally:
        for sig, old in before.items():
            signal.signal(sig, old)

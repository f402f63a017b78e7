"""Stop after the current item: a signal asks a running pass to stop, it does not kill it.

One mechanism for the host pass (SIGTERM and SIGINT, then the signal's usual
handling for a second one) and for ``datum reconcile`` (SIGTERM). Outside the
main thread no handler can be installed: the block runs without one.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Stop:
    """Set by the first signal: its name, or None while none came."""

    def __init__(self) -> None:
        self.signal: str | None = None

    def is_set(self) -> bool:
        return self.signal is not None


@contextmanager
def stop_on(*signums: signal.Signals, once: bool = False) -> Iterator[Stop]:
    """While the block runs, ``signums`` set the yielded ``Stop``; the handlers before are put back after.

    ``once``: the first signal also puts back the handler that was there before,
    so a second one gets its usual handling (the process dies).
    """
    stop = Stop()
    before: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, _frame: Any) -> None:
        stop.signal = signal.Signals(signum).name
        if once:
            signal.signal(signum, before[signum])

    for sig in signums:
        before[sig] = signal.signal(sig, handler)
    try:
        yield stop
    finally:
        for sig, old in before.items():
            signal.signal(sig, old)

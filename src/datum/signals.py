"""Stop after the current item: a signal asks a running pass to stop, it does not kill it.

One mechanism for the host pass (SIGTERM and SIGINT, then the signal's usual
handling for a second one) and for ``datum reconcile`` (SIGTERM). Outside the
main thread no handler can be installed: the block runs without one.

Light on purpose (the idle pass, ``datum.host.idle``, watches the same signals):
no ``threading``, ``contextlib`` or ``typing``, and the handlers are installed
with ``_signal``, the C module ``signal`` re-exports: ``signal`` itself
converts numbers to enums and imports ``enum`` (with ``functools`` and
``collections``: about 3 ms of a 40 ms idle pass on the 2-core machine).
"""

from __future__ import annotations

import _signal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType, TracebackType
    from typing import Any

# What stops a host pass: the service manager's SIGTERM, a person's Ctrl-C.
PASS_SIGNALS = (_signal.SIGTERM, _signal.SIGINT)
_NAMES = {_signal.SIGTERM: "SIGTERM", _signal.SIGINT: "SIGINT"}


def name(signum: int) -> str:
    """``SIGTERM`` for 15: the name the reports use."""
    if signum in _NAMES:
        return _NAMES[signum]
    import signal

    return signal.Signals(signum).name


class Stop:
    """Set by the first signal: its name, or None while none came."""

    def __init__(self) -> None:
        self.signal: str | None = None

    def is_set(self) -> bool:
        return self.signal is not None


class stop_on:  # noqa: N801 - used as ``with stop_on(...) as stop``, like the function it was
    """While the block runs, ``signums`` set the yielded ``Stop``; the handlers before are put back after.

    ``once``: the first signal also puts back the handler that was there before,
    so a second one gets its usual handling (the process dies).
    """

    def __init__(self, *signums: int, once: bool = False) -> None:
        self.signums, self.once = signums, once
        self.stop = Stop()
        self._before: dict[int, Any] = {}

    def _handler(self, signum: int, _frame: FrameType | None) -> None:
        self.stop.signal = name(signum)
        if self.once:
            _signal.signal(signum, self._before[signum])

    def __enter__(self) -> Stop:
        try:
            for sig in self.signums:
                self._before[sig] = _signal.signal(sig, self._handler)
        except ValueError:  # not the main thread: no handler can be installed
            self.__exit__(None, None, None)
        return self.stop

    def __exit__(
        self, _kind: type[BaseException] | None, _exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        before, self._before = self._before, {}
        for sig, old in before.items():
            _signal.signal(sig, old)

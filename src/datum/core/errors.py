"""What an apply callback raises, classified by what the engine does next.

::

    Exception                  anything else: as TemporaryError
     +-- TemporaryError        apply_failed, then backoff (its own window when it gives one)
     +-- PermanentError        apply_failed, not retried until the item's desired state changes
     +-- BlockedOnOwner        blocked_on_owner: counted in blocked, never in drift; no backoff
     +-- Waiting               a registered reconciler-specific reason; no backoff

Like kopf's ``TemporaryError``/``PermanentError`` and controller-runtime's
``TerminalError``: the reconciler says what kind of failure it met, the engine
decides what to do about it, in one place (``Converge.run``).
"""

from __future__ import annotations

from datum.core.vocab import AnyReason, Reason, is_specific, registered


class TemporaryError(Exception):
    """The apply failed and may succeed later: backoff, then retry.

    ``delay_passes``: sit out exactly this many passes instead of the
    exponential window (the substrate said when to come back).
    """

    def __init__(self, message: str, *, delay_passes: int | None = None) -> None:
        if delay_passes is not None and delay_passes < 1:
            raise ValueError("delay_passes must be >= 1")
        super().__init__(message)
        self.delay_passes = delay_passes


class PermanentError(Exception):
    """The apply can never succeed as asked: no retry until the item's desired state changes."""


class BlockedOnOwner(Exception):
    """Raised by an apply callback: the item waits on its owner, not on the platform."""


class Waiting(Exception):
    """Raised by an apply callback: the item waits for a reconciler-specific reason.

    ``reason``: one of the contract's specific reasons, or ``namespace.name``
    that the reconciler's plugin registered when it was loaded.
    """

    def __init__(self, reason: Reason | str, message: str = "") -> None:
        checked: AnyReason = registered(str(reason))
        if not is_specific(checked):
            raise ValueError(f"{checked.value!r} is a framework reason, not a reconciler's")
        super().__init__(message or checked.value)
        self.reason = checked

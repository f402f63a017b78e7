"""Per-item memory across passes: confirmation streak, consecutive failures, backoff.

Values are frozen; every transition returns a new value. Backoff is counted in
passes, not seconds, so it is deterministic and unaffected by a late tick.

A streak counts consecutive executed passes that saw the *same* divergence:
the same direction, the same phase (acting on the substrate, or settling a
desired record whose end state the substrate already shows) and the same
wish (the record asks for the item to be gone, or not). A change of any of
them starts the streak over, so no transition is ever confirmed by passes
that saw something else.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from datum.core.vocab import Direction

# How the store keeps an align that is not a plain one (the direction column);
# every one of them is reported as an ``align``.
_ALIGNS: dict[tuple[bool, bool], str] = {
    (False, True): "align-gone",  # remove an item its record tombstoned
    (True, False): "settle",  # finalise a record whose item is there as asked
    (True, True): "settle-gone",  # finalise a tombstone whose item is gone
}
_STORED = {text: key for key, text in _ALIGNS.items()}


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """Exponential backoff in passes: ``base * 2**(failures-1)``, capped at ``cap``."""

    base_passes: int = 1
    cap_passes: int = 64

    def __post_init__(self) -> None:
        if self.base_passes < 1 or self.cap_passes < self.base_passes:
            raise ValueError("backoff needs 1 <= base_passes <= cap_passes")

    def window(self, failures: int) -> int:
        """How many passes an item sits out after its ``failures``-th consecutive failure."""
        if failures <= 0:
            return 0
        exponent = min(failures - 1, 62)
        return int(min(self.cap_passes, self.base_passes * (2**exponent)))

    def at_cap(self, failures: int) -> bool:
        """Whether ``failures`` consecutive failures put the window at the cap: waiting longer will not help."""
        return failures > 0 and self.window(failures) >= self.cap_passes


@dataclass(frozen=True, slots=True)
class ItemMemory:
    """What the framework remembers about one diverged item between passes."""

    direction: Direction
    streak: int = 1
    failures: int = 0
    last_err: str | None = None
    retry_after_passes: int = 0
    settling: bool = False
    gone: bool = False
    # Set by a permanent failure: the fingerprint of the desired value it failed on.
    permanent: str | None = None

    @staticmethod
    def first(direction: Direction, *, settling: bool = False, gone: bool = False) -> ItemMemory:
        """An item seen diverged for the first time."""
        return ItemMemory(direction=direction, settling=settling, gone=gone)

    def seen_again(
        self, direction: Direction, *, settling: bool = False, gone: bool = False
    ) -> ItemMemory:
        """The item is diverged on another executed pass.

        The same divergence: the streak grows. Another direction, phase or
        wish: a new problem, so the streak and the failure history start over.
        """
        if (direction, settling, gone) != (self.direction, self.settling, self.gone):
            return ItemMemory.first(direction, settling=settling, gone=gone)
        return replace(self, streak=self.streak + 1)

    @property
    def stored_direction(self) -> str:
        """The direction as the store keeps it, phase and wish included (at most 16 characters)."""
        return _ALIGNS.get((self.settling, self.gone), self.direction.value)

    @staticmethod
    def parse_direction(stored: str) -> tuple[Direction, bool, bool]:
        """``(direction, settling, gone)`` from what ``stored_direction`` wrote."""
        if stored in _STORED:
            return Direction.ALIGN, *_STORED[stored]
        return Direction(stored), False, False

    @property
    def in_backoff(self) -> bool:
        """Whether the item must sit out this pass."""
        return self.retry_after_passes > 0

    def waited(self) -> ItemMemory:
        """One executed pass of the backoff window has gone by."""
        return replace(self, retry_after_passes=max(0, self.retry_after_passes - 1))

    def failed(self, error: str, policy: BackoffPolicy, delay: int | None = None) -> ItemMemory:
        """An apply failed: count it and open the next backoff window (``delay`` passes when given)."""
        failures = self.failures + 1
        return replace(
            self,
            failures=failures,
            last_err=error,
            retry_after_passes=policy.window(failures) if delay is None else delay,
        )

    def failed_for_good(self, error: str, desired: str) -> ItemMemory:
        """An apply failed permanently on the desired value fingerprinted ``desired``: no retry until it changes."""
        return replace(
            self, failures=self.failures + 1, last_err=error, retry_after_passes=0, permanent=desired
        )

    def retried(self) -> ItemMemory:
        """The desired value a permanent failure waited on changed: try again from scratch."""
        return replace(self, failures=0, last_err=None, retry_after_passes=0, permanent=None)

    def succeeded(self) -> ItemMemory:
        """An apply succeeded: failures and backoff are cleared."""
        return replace(self, failures=0, last_err=None, retry_after_passes=0, permanent=None)

"""The per-direction circuit breaker: refuse mass action in one direction."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Threshold:
    """Trip when candidates exceed ``count``, or exceed ``fraction`` of the desired items."""

    count: int | None = None
    fraction: float | None = None

    def __post_init__(self) -> None:
        if self.count is not None and self.count < 0:
            raise ValueError("breaker count must be >= 0")
        if self.fraction is not None and not 0.0 <= self.fraction <= 1.0:
            raise ValueError("breaker fraction must be between 0 and 1")

    def tripped(self, candidates: int, desired_total: int) -> bool:
        """Whether ``candidates`` confirmed items in one direction are too many to act on."""
        if self.count is not None and candidates > self.count:
            return True
        return self.fraction is not None and candidates > self.fraction * desired_total

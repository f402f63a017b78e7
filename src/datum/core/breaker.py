"""The per-direction circuit breaker: refuse mass action in one direction.

A direction trips when its confirmed candidates exceed a count, or a fraction
of the population they are drawn from: for a reap, what exists (the actual
set), so that a desired-state store that lost rows cannot reap what it forgot;
for a restore or an align, what is desired. A reap also trips whenever the
desired set is empty while something exists, unless the reconciler allows an
empty desired set (ArgoCD's ``allowEmpty``): an empty read of desired state
looks exactly like a lost store.
"""

from __future__ import annotations

from dataclasses import dataclass

from datum.core.vocab import Direction


@dataclass(frozen=True, slots=True)
class Threshold:
    """Trip when candidates exceed ``count``, or exceed ``fraction`` of their population."""

    count: int | None = None
    fraction: float | None = None

    def __post_init__(self) -> None:
        if self.count is not None and self.count < 0:
            raise ValueError("breaker count must be >= 0")
        if self.fraction is not None and not 0.0 <= self.fraction <= 1.0:
            raise ValueError("breaker fraction must be between 0 and 1")

    def tripped(self, candidates: int, population: int) -> bool:
        """Whether ``candidates`` confirmed items in one direction are too many to act on."""
        return self.why(candidates, population) is not None

    def why(self, candidates: int, population: int, what: str = "items") -> str | None:
        """Why ``candidates`` are too many, in words; ``None`` when they may be acted on."""
        if self.count is not None and candidates > self.count:
            return f"{candidates} candidates exceed the breaker count of {self.count}"
        if self.fraction is not None and candidates > self.fraction * population:
            return (
                f"{candidates} candidates exceed the breaker fraction {self.fraction:g} "
                f"of the {population} {what}"
            )
        return None


def refusal(
    direction: Direction,
    threshold: Threshold | None,
    candidates: int,
    *,
    desired: int,
    actual: int,
    allow_empty: bool,
) -> str | None:
    """Why the confirmed candidates of one direction must not be acted on; ``None`` to act."""
    if candidates == 0:
        return None
    if direction is Direction.REAP:
        if desired == 0 and actual > 0 and not allow_empty:
            return (
                f"the desired set is empty while {actual} items exist; "
                "set allow_empty = true if that is intended"
            )
        return threshold.why(candidates, actual, "items that exist") if threshold else None
    return threshold.why(candidates, desired, "items desired") if threshold else None

"""What a reconciler's pass says happened, as controller-runtime's ``Result`` does.

``run(ctx)`` may return nothing (the framework's rollup stands) or a
``Result``:

- ``Result.ok()``: nothing to add; health is the framework's rollup;
- ``Result.degraded(why)``: the pass completed, but health is at least
  ``degraded`` and ``error`` says why;
- ``Result.failing(why)``: the pass could not complete, exactly as if it had
  raised: health ``failing``, ``error`` says why, the items of the last
  completed pass stay;
- ``requeue_after=N`` on any of them: the next *scheduled* tick is due N
  intervals after this one instead of one (a pass-level backoff for a
  reconciler that keeps no per-item memory); explicit passes ignore it.
"""

from __future__ import annotations

from dataclasses import dataclass

from datum.core.vocab import Health


@dataclass(frozen=True)
class Result:
    """The outcome a pass reports about itself."""

    health: Health = Health.OK
    why: str | None = None
    requeue_after: int | None = None

    def __post_init__(self) -> None:
        if self.health is Health.UNKNOWN:
            raise ValueError("a pass that ran is never unknown")
        if self.health is not Health.OK and not (self.why or "").strip():
            raise ValueError(f"a {self.health.value} result says why")
        if self.requeue_after is not None and self.requeue_after < 1:
            raise ValueError("requeue_after counts passes: 1 or more")

    @staticmethod
    def ok(*, requeue_after: int | None = None) -> Result:
        return Result(Health.OK, None, requeue_after)

    @staticmethod
    def degraded(why: str, *, requeue_after: int | None = None) -> Result:
        return Result(Health.DEGRADED, why, requeue_after)

    @staticmethod
    def failing(why: str, *, requeue_after: int | None = None) -> Result:
        return Result(Health.FAILING, why, requeue_after)

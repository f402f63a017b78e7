"""Converge[T]: one pass of set-diff, confirmation, backoff, breaker and modes.

A reconciler calls ``Converge.run`` once per pass with desired and actual
items keyed by a stable id, an apply callback and the item memory of the last
executed pass. It gets back every diverged item with the reason it did not
converge, the next item memory, and the counts. Nothing here does I/O except
through the callbacks it is given.

The apply callback says how an item ended:

- it returns: the item was acted on (``acting``);
- it raises ``BlockedOnOwner``: the item waits on its owner (``blocked_on_owner``,
  counted in ``blocked``, never in ``drift``);
- it raises ``Waiting(reason)`` with a registered reconciler-specific reason;
- it raises ``PermanentError``: ``apply_failed``, and the item is not tried
  again until its desired value changes (its fingerprint, remembered);
- anything else it raises (``TemporaryError`` says so explicitly) is
  ``apply_failed``, and the item enters backoff.

``datum.core.errors`` draws the hierarchy.

Every transition waits for the confirmation streak, including the ones that
only move a desired record on the strength of what the substrate showed: a
reconciler that gives ``unsettled`` (its records in a transitional status,
such as a tombstone or a ``creating`` row) gets such an item reported as an
``align`` until the substrate has shown its end state for
``confirmation_ticks`` passes, and only then is its ``settle`` callback called
to write the final status. It answers the way ``apply`` does; both are given
at construction (``unsettled=``, ``settle=``).
"""

from __future__ import annotations

import hashlib
import heapq
import operator
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from datum.core.breaker import Threshold, refusal
from datum.core.diff import Divergence, diff
from datum.core.errors import BlockedOnOwner, PermanentError, TemporaryError, Waiting
from datum.core.memory import BackoffPolicy, ItemMemory
from datum.core.vocab import (
    DEGRADING_REASONS,
    AnyReason,
    ConvergeMode,
    Direction,
    Reason,
    is_specific,
)

__all__ = [
    "BlockedOnOwner",
    "Converge",
    "ConvergeConfig",
    "ItemReport",
    "PassResult",
    "PermanentError",
    "TemporaryError",
    "Waiting",
    "fingerprint",
]

D = TypeVar("D")
A = TypeVar("A")

PERMANENT = "permanent: "


def fingerprint(value: object) -> str:
    """A short digest of a desired value: a permanent failure waits until it changes."""
    return hashlib.sha256(repr(value).encode("utf-8", "backslashreplace")).hexdigest()[:32]


ApplyFn = Callable[[Direction, str, D | None, A | None], None]
SettleFn = Callable[[str, D, A | None], None]


def _default_breaker() -> dict[Direction, Threshold]:
    return {
        Direction.RESTORE: Threshold(count=100),
        Direction.REAP: Threshold(count=10, fraction=0.1),
        Direction.ALIGN: Threshold(count=100),
    }


@dataclass(frozen=True)
class ConvergeConfig:
    """A reconciler's Converge settings."""

    confirmation_ticks: int = 2
    drift_cap: int = 500
    breaker: Mapping[Direction, Threshold] = field(default_factory=_default_breaker)
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    mode: ConvergeMode = ConvergeMode.ENFORCE
    no_reap: bool = False
    allow_empty: bool = False

    def __post_init__(self) -> None:
        if self.confirmation_ticks < 1:
            raise ValueError("confirmation_ticks must be >= 1")
        if self.drift_cap < 0:
            raise ValueError("drift_cap must be >= 0")


@dataclass(frozen=True, slots=True)
class ItemReport:
    """One diverged item on one pass, and why it did not converge."""

    kind: str
    direction: Direction
    id: str
    streak: int
    confirmations_needed: int
    reason: AnyReason
    last_err: str | None = None
    desired: str | None = None
    actual: str | None = None
    failures: int | None = None
    retry_after_passes: int | None = None


@dataclass(frozen=True)
class PassResult:
    """The outcome of one executed pass over one kind."""

    kind: str
    items: tuple[ItemReport, ...]
    dropped: int
    drift: int
    blocked: int
    memory: dict[str, ItemMemory]
    reasons: Counter[AnyReason]
    tripped: frozenset[Direction]
    # Every diverged item by reason and direction, the ones past driftCap too (what metrics count).
    by_direction: Counter[tuple[AnyReason, Direction]] = field(default_factory=Counter)
    # Items in backoff or apply_failed parked at the backoff cap, the ones past driftCap too.
    at_backoff_cap: int = 0

    @property
    def degrading(self) -> bool:
        """Whether this pass puts the reconciler's health at ``degraded``."""
        return bool(self.tripped) or any(self.reasons[r] for r in DEGRADING_REASONS)


# Which retained items an operator must look at first: failing and stuck
# before waiting on confirmation. Lower sorts first.
_PRIORITY: dict[AnyReason, int] = {
    Reason.APPLY_FAILED: 0,
    Reason.BACKOFF: 1,
    Reason.CIRCUIT_BREAKER: 2,
    Reason.SUPPRESSED_UNCONFIGURED: 3,
    Reason.BLOCKED_ON_OWNER: 5,
    Reason.ACTING: 6,
    Reason.DRY_RUN: 7,
    Reason.SUPPRESSED_RESTORE_MODE: 8,
    Reason.SUPPRESSED_NO_REAP: 8,
    Reason.AWAITING_CONFIRMATION: 9,
}


def _rank(item: ItemReport) -> tuple[int, int, int, str, str]:
    return (
        _PRIORITY.get(item.reason, 4),
        -(item.failures or 0),
        -item.streak,
        item.direction.value,
        item.id,
    )


_BACKING_OFF = frozenset({Reason.BACKOFF, Reason.APPLY_FAILED})


def parked(reason: AnyReason, mem: ItemMemory, policy: BackoffPolicy) -> bool:
    """An item in backoff or apply_failed whose window has reached the policy's cap: go and look."""
    return reason in _BACKING_OFF and policy.at_cap(mem.failures)


def retain(items: list[ItemReport], cap: int) -> tuple[list[ItemReport], int]:
    """Keep at most ``cap`` items, the ones an operator must look at first; count the rest."""
    if len(items) <= cap:
        return sorted(items, key=_rank), 0
    return heapq.nsmallest(cap, items, key=_rank), len(items) - cap


class Converge(Generic[D, A]):
    """The reusable reconcile primitive over desired items of type D and actual items of type A."""

    def __init__(
        self,
        kind: str,
        config: ConvergeConfig | None = None,
        *,
        equal: Callable[[D, A], bool] = operator.eq,
        tombstone: Callable[[D], bool] | None = None,
        describe: Callable[[D], str] | None = None,
        describe_actual: Callable[[A], str] | None = None,
        prerequisite: Callable[[], str | None] | None = None,
        unsettled: Callable[[D], bool] | None = None,
        settle: SettleFn[D, A] | None = None,
    ) -> None:
        if (unsettled is None) != (settle is None):
            raise ValueError("unsettled and settle are given together or not at all")
        self.kind = kind
        self.config = config or ConvergeConfig()
        self.equal = equal
        self.tombstone = tombstone
        self.unsettled = unsettled
        self.settle = settle
        self.describe = describe
        self.describe_actual = describe_actual
        self.prerequisite = prerequisite

    def run(
        self,
        desired: Mapping[str, D],
        actual: Mapping[str, A],
        apply: ApplyFn[D, A],
        memory: Mapping[str, ItemMemory],
    ) -> PassResult:
        """Execute one pass. ``memory`` is what the last executed pass returned.

        A confirmed item to settle goes to ``settle`` (given at construction), every other to ``apply``.
        """
        cfg = self.config
        settle = self.settle
        needed = cfg.confirmation_ticks
        reasons: dict[str, AnyReason] = {}
        mem: dict[str, ItemMemory] = {}
        seen: dict[str, Divergence[D, A]] = {}
        candidates: dict[Direction, list[str]] = {d: [] for d in Direction}

        for item in diff(desired, actual, self.equal, self.tombstone, self.unsettled):
            before = memory.get(item.id)
            now = (
                before.seen_again(item.direction, settling=item.settle, gone=item.gone)
                if before
                else ItemMemory.first(item.direction, settling=item.settle, gone=item.gone)
            )
            seen[item.id] = item
            if now.permanent is not None:
                if now.permanent == fingerprint(item.desired):
                    # Failed for good on this very desired value: reported, never retried.
                    reasons[item.id] = Reason.APPLY_FAILED
                    mem[item.id] = now
                    continue
                now = now.retried()  # its desired state changed: a fresh start
            if now.streak < needed:
                reasons[item.id] = Reason.AWAITING_CONFIRMATION
            elif now.in_backoff:
                now = now.waited()
                reasons[item.id] = Reason.BACKOFF
            else:
                candidates[item.direction].append(item.id)
            mem[item.id] = now

        self._suppress(candidates, reasons)
        tripped = self._trip(candidates, reasons, len(desired), len(actual))

        for direction in Direction:
            for key in candidates[direction]:
                if cfg.mode is ConvergeMode.DRY_RUN:
                    reasons[key] = Reason.DRY_RUN
                    continue
                item = seen[key]
                try:
                    if item.settle and settle is not None and item.desired is not None:
                        settle(key, item.desired, item.actual)
                    else:
                        apply(direction, key, item.desired, item.actual)
                except BlockedOnOwner as exc:
                    reasons[key] = Reason.BLOCKED_ON_OWNER
                    mem[key] = _with_err(mem[key], str(exc))
                except Waiting as exc:
                    reasons[key] = exc.reason
                    mem[key] = _with_err(mem[key], str(exc))
                except PermanentError as exc:
                    reasons[key] = Reason.APPLY_FAILED
                    mem[key] = mem[key].failed_for_good(
                        PERMANENT + _error_text(exc), fingerprint(item.desired)
                    )
                except TemporaryError as exc:
                    reasons[key] = Reason.APPLY_FAILED
                    mem[key] = mem[key].failed(_error_text(exc), cfg.backoff, exc.delay_passes)
                except Exception as exc:  # noqa: BLE001 - any other failure is apply_failed
                    reasons[key] = Reason.APPLY_FAILED
                    mem[key] = mem[key].failed(_error_text(exc), cfg.backoff)
                else:
                    reasons[key] = Reason.ACTING
                    mem[key] = mem[key].succeeded()

        return self._result(seen, mem, reasons, tripped)

    def _suppress(self, candidates: dict[Direction, list[str]], reasons: dict[str, AnyReason]) -> None:
        """Apply modes and the prerequisite check: these items are not candidates any more."""
        cfg = self.config
        if candidates[Direction.REAP] and (cfg.mode is ConvergeMode.RESTORE or cfg.no_reap):
            why = (
                Reason.SUPPRESSED_RESTORE_MODE
                if cfg.mode is ConvergeMode.RESTORE
                else Reason.SUPPRESSED_NO_REAP
            )
            for key in candidates[Direction.REAP]:
                reasons[key] = why
            candidates[Direction.REAP] = []
        if self.prerequisite is not None and any(candidates.values()):
            missing = self.prerequisite()
            if missing:
                for direction in Direction:
                    for key in candidates[direction]:
                        reasons[key] = Reason.SUPPRESSED_UNCONFIGURED
                    candidates[direction] = []

    def _trip(
        self,
        candidates: dict[Direction, list[str]],
        reasons: dict[str, AnyReason],
        desired_total: int,
        actual_total: int,
    ) -> dict[Direction, str]:
        """Refuse to act on any item of a direction the breaker refuses; say why, per direction."""
        tripped: dict[Direction, str] = {}
        for direction, keys in candidates.items():
            why = refusal(
                direction,
                self.config.breaker.get(direction),
                len(keys),
                desired=desired_total,
                actual=actual_total,
                allow_empty=self.config.allow_empty,
            )
            if why is not None:
                tripped[direction] = f"{direction.value} breaker: {why}"
                for key in keys:
                    reasons[key] = Reason.CIRCUIT_BREAKER
                candidates[direction] = []
        return tripped

    def _result(
        self,
        seen: dict[str, Divergence[D, A]],
        mem: dict[str, ItemMemory],
        reasons: dict[str, AnyReason],
        tripped: dict[Direction, str],
    ) -> PassResult:
        reports = [
            self._report(seen[key], mem[key], reasons[key], tripped.get(seen[key].direction))
            for key in seen
        ]
        counts = Counter(reasons.values())
        by_direction = Counter((reasons[key], item.direction) for key, item in seen.items())
        at_cap = sum(1 for key, why in reasons.items() if parked(why, mem[key], self.config.backoff))
        blocked = counts[Reason.BLOCKED_ON_OWNER]
        kept, dropped = retain(reports, self.config.drift_cap)
        return PassResult(
            kind=self.kind,
            items=tuple(kept),
            dropped=dropped,
            drift=len(reports) - blocked,
            blocked=blocked,
            memory=mem,
            reasons=counts,
            tripped=frozenset(tripped),
            by_direction=by_direction,
            at_backoff_cap=at_cap,
        )

    def _report(
        self, item: Divergence[D, A], mem: ItemMemory, reason: AnyReason, breaker: str | None
    ) -> ItemReport:
        failing = reason in (Reason.BACKOFF, Reason.APPLY_FAILED)
        says_why = failing or reason is Reason.BLOCKED_ON_OWNER or is_specific(reason)
        last_err = mem.last_err if says_why else None
        if reason is Reason.CIRCUIT_BREAKER:
            last_err = breaker
        desired = None
        actual = None
        if self.describe is not None and item.desired is not None:
            desired = self.describe(item.desired)
        if (
            self.describe_actual is not None
            and item.direction is Direction.ALIGN
            and item.actual is not None
        ):
            actual = self.describe_actual(item.actual)
        return ItemReport(
            kind=self.kind,
            direction=item.direction,
            id=item.id,
            streak=mem.streak,
            confirmations_needed=self.config.confirmation_ticks,
            reason=reason,
            last_err=last_err,
            desired=desired,
            actual=actual,
            failures=mem.failures if failing else None,
            retry_after_passes=mem.retry_after_passes if failing else None,
        )


def _with_err(mem: ItemMemory, message: str) -> ItemMemory:
    """Keep the owner's or reconciler's message as the item's last word, without a failure."""
    return replace(mem, failures=0, last_err=message or None, retry_after_passes=0, permanent=None)


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip()
    return text if text else type(exc).__name__

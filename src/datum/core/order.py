"""The order a human reads things in, and which diverged items are one row: decided once for every surface.

The page (``datum.web.view``) and the command line (``datum.cli.render``) both
show hosts worst first, reconcilers by health, and a reconciler's items grouped
by cause (twelve reaps held by one tripped breaker are one row, not twelve),
the groups that need a human first. They take the order and the grouping here,
so the terminal never sorts or groups differently from the page.

Pure: items come in as whatever the caller holds (a drift item, the page's item
view) with a function that says what they share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

from datum.core.breaker import Threshold
from datum.core.explain import Act
from datum.core.vocab import AnyReason, Direction, Health, HostState, Reason

# What needs a human first.
HEALTH_ORDER = [Health.FAILING, Health.DEGRADED, Health.UNKNOWN, Health.OK]
HOST_ORDER = [
    HostState.FAILED,
    HostState.UNKNOWN,
    HostState.DRIFTED,
    HostState.AWAITING_REBOOT,
    HostState.DEGRADED,
    HostState.CONVERGED,
]
ACT_ORDER = [Act.LOOK, Act.DEPENDS, Act.WAIT, Act.NONE, Act.OWNER]

T = TypeVar("T")


def host_rank(state: str) -> int:
    """Where a host in ``state`` sorts: failed first, converged last (a word that is no state, after all)."""
    values = [s.value for s in HOST_ORDER]
    return values.index(state) if state in values else len(values)


def health_rank(health: str) -> int:
    """Where a reconciler of ``health`` sorts: failing first, ok last."""
    values = [h.value for h in HEALTH_ORDER]
    return values.index(health) if health in values else len(values)


class Cause(NamedTuple):
    """What an item shares with the others of its row: its reason, direction and last error, and its advice."""

    reason: AnyReason
    direction: Direction
    last_err: str | None
    act: Act


@dataclass
class Grouped(Generic[T]):
    """Items that share a cause, and the most urgent advice among them."""

    reason: AnyReason
    direction: Direction
    act: Act
    items: list[T]


def by_cause(items: Iterable[T], cause: Callable[[T], Cause]) -> list[Grouped[T]]:
    """``items`` grouped by reason, direction and last error, the groups that need a human first.

    Items in ``backoff`` are also split by their advice: one that failed once and retries shortly
    is not in the row of one parked at the backoff cap. Groups sort by advice (go and look first),
    then the larger first, then by reason; items keep their order within a group.
    """
    buckets: dict[tuple[str, Direction, str | None], tuple[Cause, list[tuple[T, Act]]]] = {}
    for item in items:
        c = cause(item)
        shared = c.last_err if c.reason is not Reason.BACKOFF else f"{c.last_err}|{c.act}"
        buckets.setdefault((c.reason.value, c.direction, shared), (c, []))[1].append((item, c.act))
    groups = [
        Grouped(c.reason, c.direction, min((a for _i, a in members), key=ACT_ORDER.index), [i for i, _a in members])
        for c, members in buckets.values()
    ]
    groups.sort(key=lambda g: (ACT_ORDER.index(g.act), -len(g.items), g.reason.value))
    return groups


def plural(direction: Direction, n: int) -> str:
    """``1 reap``, ``12 reaps``."""
    return f"{n} {direction.value}{'s' if n != 1 else ''}"


def group_label(reason: AnyReason, direction: Direction, n: int, breaker: Mapping[Direction, Threshold]) -> str:
    """A group's row in words: ``12 reaps held: breaker reap > 10``, ``1 align in backoff``.

    ``breaker``: the reconciler's thresholds (its ``ConvergeConfig.breaker``), named for a group the breaker holds.
    """
    if reason is Reason.CIRCUIT_BREAKER:
        threshold = breaker.get(direction)
        bound = []
        if threshold is not None and threshold.count is not None:
            bound.append(f"> {threshold.count}")
        if threshold is not None and threshold.fraction is not None:
            bound.append(f"> {threshold.fraction:.0%} of what exists")
        return f"{plural(direction, n)} held: breaker {direction.value} {' or '.join(bound) or 'tripped'}"
    if reason is Reason.BLOCKED_ON_OWNER:
        return f"{plural(direction, n)} waiting on their owners"
    if reason is Reason.AWAITING_CONFIRMATION:
        return f"{plural(direction, n)} awaiting confirmation"
    if reason is Reason.BACKOFF:
        return f"{plural(direction, n)} in backoff"
    return f"{plural(direction, n)}: {reason.value}"

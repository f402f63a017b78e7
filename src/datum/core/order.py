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

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

from datum.core.explain import Act
from datum.core.vocab import Direction, Health, HostState

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
    """What an item shares with the others of its row: its group (``datum.core.attention.group_key``:
    the reason of its line under *Needs a human*, so an item at the backoff cap stays in its row pass
    after pass whichever of backoff and apply_failed it reads), its direction, its last error, and
    its advice."""

    group: str
    direction: Direction
    last_err: str | None
    act: Act


@dataclass
class Grouped(Generic[T]):
    """Items that share a cause, and the most urgent advice among them."""

    group: str
    direction: Direction
    act: Act
    items: list[T]


def by_cause(items: Iterable[T], cause: Callable[[T], Cause]) -> list[Grouped[T]]:
    """``items`` grouped by group, direction and last error, the groups that need a human first.

    Groups sort by advice (go and look first), then the larger first, then by group; items keep
    their order within a group. The row's words are ``datum.core.attention.group_label``'s.
    """
    buckets: dict[tuple[str, Direction, str | None], list[tuple[T, Act]]] = {}
    for item in items:
        c = cause(item)
        buckets.setdefault((c.group, c.direction, c.last_err), []).append((item, c.act))
    groups = [
        Grouped(group, direction, min((a for _i, a in members), key=ACT_ORDER.index), [i for i, _a in members])
        for (group, direction, _err), members in buckets.items()
    ]
    groups.sort(key=lambda g: (ACT_ORDER.index(g.act), -len(g.items), g.group))
    return groups

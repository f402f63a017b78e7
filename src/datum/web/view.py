"""What the page shows, computed from the drift reports, the hosts and the pass history.

The template stays a layout: this module decides what needs a human first,
which items share a cause (one row for twelve reaps held by the breaker),
what each word means and whether to wait or go and look
(``datum.core.explain``, the same text as ``datum explain``), and the
history strips (the last ``STRIP`` passes, drawn as runs so a week-long
failure is one span, not fifty).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from datum.config import ReconcilerSettings
from datum.core.explain import (
    ACT_LABEL,
    Act,
    Explanation,
    Vocabulary,
    advice,
    at_backoff_cap,
    explain,
    host_explanation,
)
from datum.core.humanize import age, when
from datum.core.memory import BackoffPolicy
from datum.core.order import HEALTH_ORDER as _HEALTH_ORDER
from datum.core.order import HOST_ORDER, Cause, by_cause, group_label
from datum.core.vocab import Direction, Health, HostState, Reason
from datum.reconcile.report import DriftItem, DriftReport
from datum.store.history import STRIP, PassRow

# The order a human reads them in (what needs them first) is datum.core.order's, the CLI's too.
MAX_HOSTS = 100  # hosts per page of the hosts table (the listing's pages); all are counted


@dataclass(frozen=True)
class Run:
    """Consecutive passes of a strip that look the same: ``css`` class, how many, what a hover says."""

    css: str
    count: int
    title: str


@dataclass(frozen=True)
class Strip:
    runs: list[Run]
    label: str  # the strip in words, for screen readers and the test

    @property
    def passes(self) -> int:
        return sum(r.count for r in self.runs)


def _runs(cells: Iterable[tuple[str, str, datetime]]) -> list[Run]:
    spans: list[list[Any]] = []  # [css, text, count, first, last]
    for css, text, at in cells:
        if spans and spans[-1][0] == css:
            spans[-1][2] += 1
            spans[-1][4] = at
        else:
            spans.append([css, text, 1, at, at])
    return [
        Run(css, n, f"{text}: {when(first)}" if n == 1 else f"{text}: {n} passes, {when(first)} to {when(last)}")
        for css, text, n, first, last in spans
    ]


def _strip(cells: list[tuple[str, str, datetime]], what: str) -> Strip:
    runs = _runs(cells)
    words = ", ".join(f"{r.count} {r.title.split(':')[0]}" for r in runs)
    return Strip(runs, f"last {len(cells)} passes of {what}, oldest first: {words}" if cells else "no history yet")


def health_strip(passes: Sequence[PassRow], what: str) -> Strip:
    cells = [
        (f"h-{p.outcome}" if p.completed else "h-failing", p.outcome if p.completed else "failing", p.at)
        for p in passes
    ]
    return _strip(cells, what)


def host_strip(passes: Sequence[PassRow], what: str) -> Strip:
    return _strip([(f"s-{p.outcome}", p.outcome, p.at) for p in passes], what)


def item_strip(passes: Sequence[PassRow], key: str) -> Strip:
    cells = []
    for p in passes:
        if p.items is None:
            cells.append(("unseen", "not observed (the pass could not complete)", p.at))
        elif key in p.items:
            reason = p.items[key]
            act = _act_of(reason)
            cells.append((f"a-{act.value} r-{reason}", reason, p.at))
        else:
            cells.append(("clear", "not diverged", p.at))
    return _strip(cells, key)


def _act_of(reason: str) -> Act:
    try:
        return explain(Vocabulary.REASON, reason).act
    except KeyError:
        return Act.LOOK


def since(passes: Sequence[PassRow], same: Any) -> tuple[datetime | None, int, bool]:
    """When the current run of passes for which ``same(pass)`` holds began: (first, count, before history)."""
    count = 0
    first = None
    for p in reversed(passes):
        if not same(p):
            return first, count, False
        first, count = p.at, count + 1
    return first, count, len(passes) >= STRIP


@dataclass
class ItemView:
    item: DriftItem
    key: str
    act: Act
    at_cap: bool
    strip: Strip
    first_diverged: datetime | None

    @property
    def since_text(self) -> str:
        n = self.item.streak
        passes = f"{n} pass{'es' if n != 1 else ''}"
        if self.first_diverged is None:
            return f"diverged for {passes} (began before the kept history)"
        return f"diverged since {when(self.first_diverged)} ({passes})"


@dataclass
class Group:
    """Items that share a cause: reason, direction and the same last error."""

    reason: Reason
    direction: Direction
    items: list[ItemView]
    label: str
    explanation: Explanation
    act: Act
    anchor: str = ""


def _group_label(reason: Reason, direction: Direction, items: list[ItemView], own: ReconcilerSettings) -> str:
    return group_label(reason, direction, len(items), own.converge_config().breaker)


@dataclass
class ReconcilerView:
    report: DriftReport
    explanation: Explanation
    strip: Strip
    health_since: str
    groups: list[Group]
    owner_groups: list[Group]
    last_completed: datetime | None
    backoff: BackoffPolicy

    @property
    def name(self) -> str:
        return self.report.reconciler

    @property
    def stranded(self) -> int:
        return sum(1 for c in self.report.coverage if c.stranded)

    @property
    def at_cap(self) -> list[ItemView]:
        return [i for g in self.groups for i in g.items if i.at_cap]


@dataclass
class HostView:
    status: Any  # api.models.HostStatus
    explanation: Explanation
    strip: Strip
    state_since: str

    @property
    def anchor(self) -> str:
        return f"host-{self.status.host}"


@dataclass
class Attention:
    """One line of "needs a human": what, where to look, why."""

    act: Act
    text: str
    href: str
    detail: str = ""


@dataclass(frozen=True)
class HostsPage:
    """Which page of hosts the table shows: one state's (or, None, the worst first), and the next page's cursor."""

    state: str | None = None
    next: str | None = None


@dataclass(frozen=True)
class Rebooting:
    """A host holding its group's reboot lease (``datum.store.leases.Lease``), or one past its timeout."""

    host: str
    group: str
    since: datetime
    expires_at: datetime
    overdue: bool

    @property
    def anchor(self) -> str:
        return f"host-{self.host}"


@dataclass
class Overview:
    reconcilers: list[ReconcilerView]
    hosts: list[HostView] | None
    hosts_total: int
    health_counts: list[tuple[str, int]]
    host_counts: list[tuple[str, int]]
    hosts_page: HostsPage = field(default_factory=lambda: HostsPage())
    attention: list[Attention] = field(default_factory=list)
    rebooting: list[Rebooting] = field(default_factory=list)  # the fleet's reboot budget, when hosts are readable
    reboot_limit: int = 0


def _since_text(first: datetime | None, count: int, before: bool, word: str) -> str:
    if first is None:
        return ""
    if before:
        return f"{word} for all of the last {count} passes (since before {when(first)})"
    return f"{word} since {when(first)} ({count} pass{'es' if count != 1 else ''})"


def reconciler_view(
    report: DriftReport,
    own: ReconcilerSettings,
    passes: Sequence[PassRow],
    first_seen: Any,
) -> ReconcilerView:
    """``first_seen(streak)``: when the pass ``streak - 1`` passes back ran (``store.history.first_seen``)."""
    backoff = own.converge_config().backoff
    seen: dict[int, datetime | None] = {}
    views: list[ItemView] = []
    for item in report.items:
        key = f"{item.kind}/{item.id}"
        if item.streak not in seen:
            seen[item.streak] = first_seen(item.streak)
        views.append(
            ItemView(
                item=item,
                key=key,
                act=advice(item.reason, item.failures, backoff),
                at_cap=at_backoff_cap(item.reason, item.failures, backoff),
                strip=item_strip(passes, key),
                first_diverged=seen[item.streak],
            )
        )
    groups = [
        Group(
            g.reason, g.direction, g.items, _group_label(g.reason, g.direction, g.items, own),
            explain(Vocabulary.REASON, g.reason), g.act,
        )
        for g in by_cause(views, lambda v: Cause(v.item.reason, v.item.direction, v.item.last_err, v.act))
    ]
    for n, g in enumerate(groups):
        g.anchor = f"{g.reason.value}-{g.direction.value}-{n}"
    health = report.health
    first, count, before = since(passes, lambda p: (p.outcome if p.completed else "failing") == health.value)
    last_completed = next((p.at for p in reversed(passes) if p.completed), None)
    return ReconcilerView(
        report=report,
        explanation=explain(Vocabulary.HEALTH, health.value),
        strip=health_strip(passes, report.reconciler),
        health_since=_since_text(first, count, before, health.value) if health is not Health.OK else "",
        groups=[g for g in groups if g.reason is not Reason.BLOCKED_ON_OWNER],
        owner_groups=[g for g in groups if g.reason is Reason.BLOCKED_ON_OWNER],
        last_completed=last_completed,
        backoff=backoff,
    )


def host_view(status: Any, passes: Sequence[PassRow]) -> HostView:
    state = status.state
    first, count, before = since(passes, lambda p: p.outcome == state.value)
    return HostView(
        status=status,
        explanation=host_explanation(state.value, status.reason),
        strip=host_strip(passes, status.host),
        state_since=_since_text(first, count, before, state.value) if state is not HostState.CONVERGED else "",
    )


def overview(
    reconcilers: list[ReconcilerView],
    hosts: list[HostView] | None,
    hosts_by_state: dict[str, int] | None,
    hosts_page: HostsPage | None = None,
    rebooting: Sequence[Rebooting] = (),
    reboot_limit: int = 0,
    broken: Sequence[tuple[str, str]] = (),
) -> Overview:
    """The page's view. ``broken``: (name, why) of each reconciler plugin that did not load, counted
    ``unknown`` and put first under "Needs a human" (absent, it would read as not installed)."""
    health_counts = [
        (h.value, sum(1 for r in reconcilers if r.report.health is h) + (len(broken) if h is Health.UNKNOWN else 0))
        for h in _HEALTH_ORDER
    ]
    host_counts = [(s.value, (hosts_by_state or {}).get(s.value, 0)) for s in HOST_ORDER]
    out = Overview(
        reconcilers=reconcilers,
        hosts=hosts,
        hosts_total=sum((hosts_by_state or {}).values()),
        health_counts=health_counts,
        host_counts=host_counts,
        hosts_page=hosts_page or HostsPage(),
        rebooting=list(rebooting),
        reboot_limit=reboot_limit,
    )
    attention = out.attention
    for name, why in broken:
        attention.append(Attention(Act.LOOK, f"reconciler plugin {name} did not load", "#reconcilers", why))
    for r in reconcilers:
        if r.report.health is Health.FAILING:
            attention.append(
                Attention(Act.LOOK, f"{r.name} is failing", f"#reconciler-{r.name}", r.report.error or "")
            )
    for r in reconcilers:
        for i in r.at_cap:
            attention.append(
                Attention(
                    Act.LOOK,
                    f"{i.key} ({r.name}) is parked at the backoff cap after {i.item.failures} failures",
                    f"#item-{r.name}-{i.key}",
                    i.item.last_err or "",
                )
            )
    for r in reconcilers:
        for c in r.report.coverage:
            if c.stranded:
                attention.append(
                    Attention(
                        Act.LOOK,
                        f"{c.count} {c.kind} row{'s' if c.count != 1 else ''} stranded in {c.status} ({r.name})",
                        f"#coverage-{r.name}",
                        f"oldest {age(c.oldest_age_seconds)}; no work query selects this status and nothing owns it",
                    )
                )
    for state, words in ((HostState.FAILED, "failed"), (HostState.UNKNOWN, "is unknown")):
        for h in hosts or []:
            if h.status.state is state:
                attention.append(Attention(Act.LOOK, f"host {h.status.host} {words}", f"#{h.anchor}", h.status.reason or ""))
    for b in out.rebooting:
        if b.overdue:
            attention.append(
                Attention(
                    Act.LOOK, f"host {b.host} has not come back from its reboot", f"#{b.anchor}",
                    f"its reboot lease of group {b.group} (since {when(b.since)}) expired at {when(b.expires_at)} "
                    "with no report from a new boot; the slot is free again",
                )
            )
    for r in reconcilers:
        for g in r.groups:
            if g.act is Act.LOOK and g.reason is not Reason.BACKOFF:
                attention.append(Attention(Act.LOOK, f"{g.label} ({r.name})", f"#group-{r.name}-{g.anchor}", g.explanation.summary))
    return out


__all__ = [
    "ACT_LABEL", "HOST_ORDER", "HostsPage", "Overview", "Rebooting", "overview", "reconciler_view", "host_view", "MAX_HOSTS",
]

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
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from datum.config import ReconcilerSettings
from datum.core import attention as need
from datum.core.attention import Need, Severity
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
from datum.core.humanize import when
from datum.core.memory import BackoffPolicy
from datum.core.order import HEALTH_ORDER as _HEALTH_ORDER
from datum.core.order import HOST_ORDER, Cause, by_cause
from datum.core.vocab import Action, Direction, Health, HostState, Reason
from datum.fleet.rollouts.status import Rollout, without_said
from datum.reconcile.report import DriftItem, DriftReport
from datum.store.history import STRIP, PassRow

# The order a human reads them in (what needs them first) is datum.core.order's, the CLI's too.
MAX_HOSTS = 100  # hosts per page of the hosts table (the listing's pages); all are counted
DISABLED = "disabled"  # the reconcilers tile's count of switched-off reconcilers, apart from their health


@dataclass(frozen=True)
class Badge:
    """What a thing calls for, as a coloured word: the red *go and look* only on what *Needs a human* lists."""

    css: str
    label: str


def act_badge(act: Act) -> Badge:
    return Badge(f"act-{act.value}", ACT_LABEL[act])


def severity_badge(severity: Severity) -> Badge:
    return Badge("act-look" if severity is Severity.LOOK else "act-check", need.SEVERITY_LABEL[severity])


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
    """Items that share a cause: the line they belong to (or their reason), direction, and the same last error.

    ``key`` is ``datum.core.attention.group_key``: a failing item stays in its group whether this pass retried it
    (``apply_failed``) or waited it out (``backoff``).
    """

    key: str
    direction: Direction
    items: list[ItemView]
    label: str
    explanation: Explanation
    act: Act
    anchor: str = ""

    @property
    def reason(self) -> str:
        """The reason word the group's summary shows: the items' own, or both failing ones."""
        reasons = {i.item.reason.value for i in self.items}
        if reasons <= {Reason.BACKOFF.value, Reason.APPLY_FAILED.value}:
            return "backoff / apply_failed"
        return self.key if len(reasons) != 1 else reasons.pop()

    @property
    def badge(self) -> Badge:
        return act_badge(self.act)


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
    enabled: bool = True
    act: Act = Act.NONE  # what its health calls for, as Needs a human decided (set by ``overview``)

    @property
    def name(self) -> str:
        return self.report.reconciler

    @property
    def stranded(self) -> int:
        return sum(1 for c in self.report.coverage if c.stranded)

    @property
    def badge(self) -> Badge:
        return act_badge(self.act)


@dataclass
class HostView:
    status: Any  # api.models.HostSummary
    explanation: Explanation
    strip: Strip
    state_since: str
    line: Need | None = None  # its line of Needs a human, when it has one

    @property
    def anchor(self) -> str:
        return f"host-{self.status.host}"

    @property
    def href(self) -> str:
        return host_href(self.status.host)

    @property
    def badge(self) -> Badge | None:
        """Red or amber only when Needs a human lists it; else what its state calls for (never red): the call
        ``datum hosts`` and ``datum status`` print too (``datum.core.attention.host_call``)."""
        call = need.host_call(self.status.state.value, self.status.reason, self.line)
        if call is None:
            return None
        return severity_badge(call) if isinstance(call, Severity) else act_badge(call)

    @property
    def do(self) -> str:
        if self.line is not None:
            return self.line.do
        if self.status.state is HostState.AWAITING_REBOOT and self.explanation.vocabulary is Vocabulary.HOST_STATE:
            return need.reboot_do(self.status.host, _dumped(self.status.reboot))
        return self.explanation.do


def _dumped(model: Any) -> dict[str, Any] | None:
    return None if model is None else model.model_dump(mode="json", by_alias=True, exclude_none=True)  # type: ignore[no-any-return]


def host_href(host: str) -> str:
    """The host's own page (``GET /hosts/{host}``)."""
    return f"/hosts/{quote(host, safe='')}"


def overview_href(section: str) -> str:
    """A section of the overview as a browser opens it: the page's shell (``GET /``), which asks for the token and
    scrolls to ``section`` once its data came. ``/ui/overview`` is that data, for the shell's own requests with
    the bearer token: a link there is a 401 in a browser."""
    return f"/#{quote(section, safe='')}"


@dataclass(frozen=True)
class Line:
    """One line of *Needs a human* as the page shows it: the decision's line and where its detail is."""

    need: Need
    href: str

    @property
    def badge(self) -> Badge:
        return severity_badge(self.need.severity)


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
    unhealthy: str | None = None  # back from a new boot, not converged and healthy: why (the lease holds)

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
    attention: list[Line] = field(default_factory=list)
    hosts_not_listed: int = 0  # hosts not converged past the worst ones the decision considered
    rebooting: list[Rebooting] = field(default_factory=list)  # the fleet's reboot budget, when hosts are readable
    reboot_limit: int = 0
    reboot_blocked: str | None = None  # why no reboot lease is granted in any group ([fleet] reboot_block_query)
    reboot_waiting: dict[str, list[str]] = field(default_factory=dict)  # group -> hosts waiting, in reboot_order
    changes: Changes | None = None  # the fleet's timeline, when the token may read its history
    revisions: Rollout | None = None  # hosts per revision of the fleet's manifests (datum.fleet.rollouts.status), with hosts
    staged: Any = None  # the staged rollout in force ([fleet.rollout]; a RolloutStatus), with hosts

    @property
    def without_said(self) -> list[str]:
        """What the hosts whose pass names no revision are, in ``datum rollout status``'s words (none when the
        page did not count them: more than ``ORIGINS_ON_PAGE``)."""
        return without_said(self.revisions.without_by) if self.revisions is not None else []


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
    enabled: bool = True,
) -> ReconcilerView:
    """``first_seen(streak)``: when the pass ``streak - 1`` passes back ran (``store.history.first_seen``)."""
    config = own.converge_config()
    backoff = config.backoff
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
    groups = []
    for g in by_cause(
        views, lambda v: Cause(need.group_key(v.item.dump(), backoff), v.item.direction, v.item.last_err, v.act)
    ):
        reason = g.items[0].item.reason
        failing = reason in (Reason.BACKOFF, Reason.APPLY_FAILED)
        label = need.group_label(g.group, g.direction, len(g.items), config.breaker.get(g.direction),
                                 report.reconciler, [v.key for v in g.items])
        groups.append(Group(g.group, g.direction, g.items, label, _explained(Reason.BACKOFF if failing else reason), g.act))
    taken: dict[str, int] = {}
    for g in groups:
        base = f"{g.key}-{g.direction.value}"
        taken[base] = taken.get(base, 0) + 1
        g.anchor = base if taken[base] == 1 else f"{base}-{taken[base]}"
    health = report.health
    first, count, before = since(passes, lambda p: (p.outcome if p.completed else "failing") == health.value)
    last_completed = next((p.at for p in reversed(passes) if p.completed), None)
    return ReconcilerView(
        report=report,
        explanation=explain(Vocabulary.HEALTH, health.value),
        strip=health_strip(passes, report.reconciler),
        health_since=_since_text(first, count, before, health.value) if health is not Health.OK and enabled else "",
        groups=[g for g in groups if g.key != Reason.BLOCKED_ON_OWNER.value],
        owner_groups=[g for g in groups if g.key == Reason.BLOCKED_ON_OWNER.value],
        last_completed=last_completed,
        backoff=backoff,
        enabled=enabled,
    )


def _explained(reason: Any) -> Explanation:
    try:
        return explain(Vocabulary.REASON, reason.value)
    except KeyError:  # a plugin's reason whose plugin is gone: say so rather than fail the page
        return Explanation(Vocabulary.REASON, reason.value, "", "A reason of a plugin not loaded here.",
                           "Go and look at the item's lastErr.", Act.LOOK)


def host_view(status: Any, passes: Sequence[PassRow], lines: Sequence[Need] = ()) -> HostView:
    """``lines``: *Needs a human* as decided (a host's line may come from a reboot lease past its timeout);
    a host they do not name has the line its own summary gives (``datum.core.attention.host_need``)."""
    state = status.state
    first, count, before = since(passes, lambda p: p.outcome == state.value)
    return HostView(
        status=status,
        explanation=host_explanation(state.value, status.reason),
        strip=host_strip(passes, status.host),
        state_since=_since_text(first, count, before, state.value) if state is not HostState.CONVERGED else "",
        line=next((n for n in lines if n.host == status.host), None) or need.host_need(status.dump()),
    )


_REBOOT_LINES = (
    need.MANUAL_REBOOT, need.REBOOT_REFUSED, need.NO_REBOOT_LEASE, need.PRE_REBOOT_FAILED, need.REBOOT_OVERDUE,
)


@dataclass
class HostPage:
    """A host's own page: its state and line, the reboot it needs and what to do, what is not converged (with
    the diffs, redacted as in the API), its last report, and its passes."""

    host: HostView
    status: Any  # api.models.HostStatus: GET /v1/hosts/{host}'s answer
    canary: str | None = None  # the canary of the rollout in force: which revision it runs, which it is served

    @property
    def reboot(self) -> Any:
        """The reboot the last pass recorded (``RebootStatus``), or None."""
        report = self.status.report
        return report.reboot if report is not None and report.reboot is not None else self.status.reboot

    @property
    def reboot_badge(self) -> Badge:
        line = self.host.line
        if line is not None and line.reason in _REBOOT_LINES:
            return severity_badge(line.severity)
        return act_badge(Act.WAIT)

    @property
    def reboot_do(self) -> str:
        line = self.host.line
        if line is not None and line.reason in _REBOOT_LINES:
            return line.do
        reboot = self.reboot
        if reboot is not None and reboot.requested_at is not None:
            return f"Wait: a reboot was requested at {when(reboot.requested_at)}; the host's next pass from a new boot clears it."
        return need.reboot_do(self.status.host, _dumped(reboot))


def host_page(
    status: Any, passes: Sequence[PassRow], overdue: Sequence[dict[str, Any]] = (),
    rollout: dict[str, Any] | None = None,
) -> HostPage:
    """``status``: ``GET /v1/hosts/{host}``'s answer (``api.models.HostStatus``); ``passes``: its history;
    ``overdue``: its reboot lease when past its timeout (JSON), which makes a line of its own; ``rollout``: the
    rollout in force with its canaries (``datum.fleet.rollouts.canaries``): a canary's page says it is one."""
    lines = need.decide(hosts=[status.dump()], overdue=overdue, rollout=rollout)
    canary = need.canary_said(rollout, status.host, status.revision)
    return HostPage(host_view(status, passes, lines), status, canary)


def href(line: Need) -> str:
    """Where a line's detail is on the page: the host's own page, the item, the group, the coverage, the section."""
    if line.host is not None:
        return host_href(line.host)
    name = line.reconciler
    if line.reason == need.PLUGIN_BROKEN:
        return "#reconcilers"
    if line.reason in (need.BACKOFF_CAP, need.REPEATED_FAILURES) and line.ids:
        return f"#item-{name}-{line.ids[0]}"
    if line.reason == need.STRANDED:
        return f"#coverage-{name}"
    if line.direction is not None:
        return f"#group-{name}-{line.reason}-{line.direction.value}"
    return f"#reconciler-{name}"


def overview(
    reconcilers: list[ReconcilerView],
    hosts: list[HostView] | None,
    hosts_by_state: dict[str, int] | None,
    lines: Sequence[Need],
    hosts_page: HostsPage | None = None,
    rebooting: Sequence[Rebooting] = (),
    reboot_limit: int = 0,
    broken: Sequence[tuple[str, str]] = (),
    hosts_not_listed: int = 0,
    changes: Changes | None = None,
    revisions: Rollout | None = None,
    reboot_blocked: str | None = None,
    reboot_waiting: dict[str, list[str]] | None = None,
) -> Overview:
    """The page's view. ``lines``: *Needs a human*, as ``datum.core.attention.decide`` made them (``GET
    /v1/attention`` serves the same). ``broken``: (name, why) of each reconciler plugin that did not load,
    counted ``unknown`` (absent, it would read as not installed)."""
    on = [r for r in reconcilers if r.enabled]
    health_counts = [
        (h.value, sum(1 for r in on if r.report.health is h) + (len(broken) if h is Health.UNKNOWN else 0))
        for h in _HEALTH_ORDER
    ]
    health_counts.append((DISABLED, len(reconcilers) - len(on)))
    host_counts = [(s.value, (hosts_by_state or {}).get(s.value, 0)) for s in HOST_ORDER]
    named = {line.reconciler for line in lines if line.reconciler is not None}
    for r in reconcilers:
        if r.name in named:
            r.act = Act.LOOK
        elif not r.enabled or r.report.health is Health.OK:
            r.act = Act.NONE
        else:  # degraded by items that retry by themselves, or before its first tick: wait
            r.act = Act.WAIT
    return Overview(
        reconcilers=reconcilers,
        hosts=hosts,
        hosts_total=sum((hosts_by_state or {}).values()),
        health_counts=health_counts,
        host_counts=host_counts,
        hosts_page=hosts_page or HostsPage(),
        attention=[Line(n, href(n)) for n in lines],
        hosts_not_listed=hosts_not_listed,
        rebooting=list(rebooting),
        reboot_limit=reboot_limit,
        reboot_blocked=reboot_blocked,
        reboot_waiting=dict(reboot_waiting or {}),
        changes=changes,
        revisions=revisions if revisions is not None and (revisions.revisions or revisions.without) else None,
    )


__all__ = [
    "ACT_LABEL", "HOST_ORDER", "HostsPage", "Overview", "Rebooting", "overview", "reconciler_view", "host_view", "MAX_HOSTS",
]


# The windows the page's timeline offers, and how many of its events it lists.
CHANGE_WINDOWS: dict[str, tuple[str, timedelta]] = {
    "1h": ("the last hour", timedelta(hours=1)),
    "1d": ("the last day", timedelta(days=1)),
}
CHANGES_SHOWN = 50


@dataclass(frozen=True)
class Changes:
    """The fleet's timeline (``GET /v1/events``' rows): what changed, failed, drifted or was blocked, and where,
    in ``window`` (a key of ``CHANGE_WINDOWS``), newest first; ``more`` when there were more than listed."""

    window: str
    events: list[dict[str, Any]]
    more: bool

    @property
    def words(self) -> str:
        return CHANGE_WINDOWS[self.window][0]


def event_word(event: dict[str, Any]) -> str:
    """What an event says: the change made (``updated``), or the state the resource was left in."""
    action = event.get("action")
    if event.get("changed") and action in Action._value2member_map_ and action != Action.NONE.value:
        return Action(action).past
    return str(event.get("state") or action or "")


@dataclass(frozen=True)
class KeptPass:
    """One kept pass on a host's page (``fleet:ReadHistory``): its row, and the resources it changed or found
    failed, drifted or blocked, with their diffs redacted as in the API (empty when its report is not kept)."""

    row: Any  # api.models.PassSummary
    resources: list[Any]  # host.report.ResourceReport
    report_kept: bool


def kept_passes(rows: Sequence[Any], reports: dict[str, Any]) -> list[KeptPass]:
    """``rows`` (``PassSummary``, newest first) with the event resources of the kept report of each's digest.

    ``reports`` are the kept reports by digest, already validated and redacted by the API (a report that
    does not validate is absent or None): the page shows what the API would answer, never more."""
    from datum.core.passcontent import is_event

    out = []
    for row in rows:
        report = reports.get(row.digest) if row.digest else None
        resources = [r for r in report.resources if is_event(r.dump())] if report is not None else []
        out.append(KeptPass(row, resources, report is not None))
    return out

"""Readable terminal output: rich tables that fit the terminal, imported only when a human is reading.

Every table has a header and fits the terminal's width (``$COLUMNS``, else 80 off a terminal):
long text wraps inside its column at word boundaries, short words (a state, a status, the
``stranded`` flag) are never cut. What the page groups is grouped here too, and in the page's
order, both taken from ``datum.core.order``: a reconciler's items one row per cause (twelve reaps
held by a breaker are one row), the rows that need a human first; hosts worst first. Times are
relative to now (``5m ago``); ``--wide`` shows the absolute UTC time instead, every item of a group
and every resource of a pass (``datum.core.humanize``).

A table's ``advice`` column says what a row calls for in the page's words (``go and look``,
``wait``): each renderer takes it from one function given to it, so what needs a human is decided
once, elsewhere, and only drawn here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from datum.core.attention import (
    Call,
    Need,
    Severity,
    call_label,
    group_key,
    group_label,
    host_call,
    host_need,
)
from datum.core.explain import ACT_LABEL, Act, advice, at_backoff_cap
from datum.core.humanize import age, ago, when
from datum.core.order import HOST_ORDER, Cause, by_cause

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from datum.core.breaker import Threshold
    from datum.core.memory import BackoffPolicy
    from datum.core.vocab import Direction
    from datum.reconcile.report import DriftItem, DriftReport, ReconcilerSummary

_HEALTH_STYLE = {"ok": "green", "degraded": "yellow", "failing": "bold red", "unknown": "dim"}
_STATE_STYLE = {
    "converged": "green", "drifted": "yellow", "failed": "bold red", "blocked": "red", "degraded": "yellow",
    "skipped": "yellow", "awaiting-reboot": "magenta", "unknown": "dim", "pending": "dim",
}
_ACT_STYLE = {Act.LOOK: "bold red", Act.DEPENDS: "yellow", Act.WAIT: "", Act.NONE: "dim", Act.OWNER: "cyan"}
_CALL_STYLE = {Severity.LOOK: "bold red", Severity.CHECK: "yellow"}
WIDE = 160  # the least width of --wide output
IDS_SHOWN = 3  # ids of a group's items shown without --wide


@dataclass(frozen=True)
class Times:
    """How this command prints a time: relative to ``now``, or (``wide``) absolute in UTC."""

    now: datetime
    wide: bool = False

    def __call__(self, value: datetime | str | None) -> str:
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                return value
        return when(value) if self.wide else ago(value, self.now)


def console(wide: bool = False) -> Console:
    """A console of the terminal's width (``$COLUMNS`` wins; 80 off a terminal); ``--wide``: at least ``WIDE``."""
    from rich.console import Console

    out = Console(highlight=False, soft_wrap=False)
    if wide and out.width < WIDE:
        out = Console(highlight=False, soft_wrap=False, width=WIDE)
    return out


def text(value: str, style: str = "") -> Text:
    """``value`` as it is: never read as markup (a resource id ``File[/etc/motd]`` holds brackets)."""
    from rich.text import Text

    return Text(value, style=style)


def lines(*parts: Text | str | None) -> Text:
    """The non-empty ``parts``, one per line."""
    from rich.text import Text

    return Text("\n").join(p if not isinstance(p, str) else text(p) for p in parts if p)


def table(title: str | None = None) -> Table:
    """A table with a header and no vertical rules, so the columns get the width."""
    from rich import box
    from rich.table import Table

    return Table(
        title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
        show_edge=False, expand=False,
    )


@dataclass(frozen=True)
class Column:
    """A column of ``records``: its header, whether a long cell folds (else it wraps at words), its widest, and
    whether its cells are kept whole (``whole``: a label, or a name an operator copies, is never cut across
    lines: a label's column is as wide as its longest; a name too long for the room left is printed whole on a
    line of its own, above its row)."""

    header: str
    fold: bool = False
    most: int | None = None
    whole: bool = False


def records(out: Console, columns: Sequence[Column], rows: Sequence[tuple[Sequence[Text], Text | None]]) -> None:
    """Rows of short cells under a header, each followed by its long text (a reason) on the whole width.

    A table cell would hold the long text to its column's width, a few words a line; here the cells
    are aligned as in a table and the text runs under them, indented, at the terminal's width.
    """
    from rich.padding import Padding

    widths = []
    for n, c in enumerate(columns):
        longest = max([len(c.header), *(cells[n].cell_len for cells, _ in rows)])
        widths.append(min(longest, c.most) if c.most else longest)
    spare = out.width - sum(widths) - 3 * (len(widths) - 1)  # a space of padding each side, a rule between
    if spare < 0:  # the folding column gives the room back
        n = next((i for i, c in enumerate(columns) if c.fold), 0)
        widths[n] = max(8, widths[n] + spare)
    for i, (cells, detail) in enumerate(rows):
        cells = list(cells)
        for n, (c, w) in enumerate(zip(columns, widths, strict=True)):
            if c.whole and cells[n].cell_len > w:  # a name wider than its room: whole, on a line of its own
                if i == 0:
                    heads = table()
                    for c2, w2 in zip(columns, widths, strict=True):
                        heads.add_column(c2.header, width=w2)
                    out.print(heads)
                out.print(cells[n], overflow="ignore", crop=False, soft_wrap=True)
                cells[n] = text("")
                i = max(i, 1)  # the header is printed
        t = table()
        t.show_header = i == 0
        for c, w in zip(columns, widths, strict=True):
            t.add_column(c.header, width=w, overflow="fold" if c.fold else "ellipsis" if not c.most else "fold")
        t.add_row(*cells)
        out.print(t)
        if detail is not None:
            out.print(Padding(detail, (0, 0, 0, 2), expand=False))


def summary(out: Console, first: str, phrases: Sequence[str]) -> None:
    """A line of counts (``7 hosts  failed 1  unknown 2  awaiting-reboot 1``), wrapped between its phrases, never
    inside one: a state is never parted from its count."""
    line = first
    for phrase in phrases:
        if line and len(line) + 2 + len(phrase) > out.width:
            out.print(line, overflow="ignore", crop=False, soft_wrap=True)
            line = phrase
        else:
            line = f"{line}  {phrase}" if line else phrase
    if line:
        out.print(line, overflow="ignore", crop=False, soft_wrap=True)


def act(value: Act) -> Text:
    return text(ACT_LABEL[value], _ACT_STYLE[value])


def _retry_in(passes: int | None) -> str:
    if passes is None:
        return ""
    if passes == 0:
        return "retry next pass"
    return f"retry in {passes} pass{'' if passes == 1 else 'es'}"


def _item_facts(i: DriftItem, backoff: BackoffPolicy | None) -> str:
    """What one item says beyond its reason: its streak, failures, when it is retried, whether it is parked."""
    facts = [f"streak {i.streak}/{i.confirmations_needed}"]
    if i.failures is not None:
        facts.append(f"failures {i.failures}")
    if i.retry_after_passes is not None:
        facts.append(_retry_in(i.retry_after_passes))
    if at_backoff_cap(i.reason, i.failures, backoff):
        facts.append("parked at the backoff cap")
    return ", ".join(facts)


def _sides(i: DriftItem) -> str | None:
    said = [f"{k}: {v}" for k, v in (("desired", i.desired), ("actual", i.actual)) if v]
    return "; ".join(said) or None


def _group_detail(items: list[DriftItem], wide: bool, backoff: BackoffPolicy | None) -> Text:
    """Under a group's row: its items (the first few unless ``wide``), their facts, what they share."""
    first = items[0]
    if len(items) == 1 or wide:
        body = [
            lines(f"{i.kind}/{i.id}: {_item_facts(i, backoff)}", _sides(i), text(f"last error: {i.last_err}", "red")
                  if i.last_err and len(items) == 1 else None)
            for i in items
        ]
    else:
        shown = items[:IDS_SHOWN]
        more = len(items) - len(shown)
        body = [text(", ".join(f"{i.kind}/{i.id}" for i in shown) + (f" and {more} more (--wide lists them)" if more else ""))]
    shared = text(f"last error: {first.last_err}", "red") if first.last_err and len(items) > 1 else None
    return lines(*body, shared)


def health_word(r: Any) -> str:
    """A reconciler's health as the terminal prints it: a reconciler switched off reads ``disabled``, not the
    ``unknown`` (or the last pass's health) its JSON keeps (``enabled`` false, where the row has it)."""
    return str(r.health.value) if getattr(r, "enabled", True) else "disabled"


def drift(
    report: DriftReport, out: Console, times: Times, breaker: Mapping[Direction, Threshold],
    backoff: BackoffPolicy | None, advise: Callable[[DriftItem], Act] | None = None,
) -> None:
    """The drift report: a header, the items one row per cause (the page's groups and order), the coverage.

    ``breaker`` names the threshold of a group the breaker holds; ``advise`` says what an item calls
    for (default: ``datum.core.explain.advice`` from its failures and ``backoff``).
    """
    from rich.markup import escape

    advise = advise or (lambda i: advice(i.reason, i.failures, backoff))
    health = health_word(report)
    style = _HEALTH_STYLE.get(health, "dim")
    head = (
        f"[bold]{escape(report.reconciler)}[/]  health [{style}]{health}[/]  "
        f"drift {report.drift}  blocked {report.blocked}"
        + (f"  stranded {sum(1 for c in report.coverage if c.stranded)}" if report.coverage_reported else "")
        + f"  last ran {times(report.last_ran_at)}"
    )
    if report.as_of != report.last_ran_at:
        head += f"  (latest tick {times(report.as_of)} was skipped)"
    out.print(head)
    if not report.enabled:
        out.print(text(f"switched off ([reconcilers.{report.reconciler}] enabled = false): no pass runs; its health "
                       "is what its last pass left", "yellow"))
    if report.error:
        out.print(text(f"the last pass could not complete: {report.error}", "bold red"))
    if not report.items_reported:
        out.print(text("this reconciler does not report items: an empty list means nothing", "dim"))
    elif report.items:
        groups = by_cause(
            report.items, lambda i: Cause(group_key(i.dump(), backoff), i.direction, i.last_err, advise(i))
        )
        out.print("")
        out.print(text(f"{len(report.items)} items, one row per cause, what needs a human first", "bold"))
        records(
            out,
            [Column("advice", whole=True), Column("items", fold=True, most=60), Column("reason", fold=True)],
            [
                (
                    [act(g.act), text(group_label(g.group, g.direction, len(g.items), breaker.get(g.direction),
                                            report.reconciler, [f"{i.kind}/{i.id}" for i in g.items]), "bold"),
                     text(", ".join(sorted({i.reason.value for i in g.items})))],
                    _group_detail(g.items, times.wide, backoff),
                )
                for g in groups
            ],
        )
    elif report.last_ran_at is None:
        out.print("no pass has executed yet" if report.enabled else "no pass has executed: it is switched off")
    elif report.error:
        out.print("no items: no pass of this reconciler has completed yet")
    else:
        out.print("no diverged items on the last executed pass")
    if report.dropped:
        out.print(text(f"{report.dropped} more items past driftCap {report.drift_cap} not shown", "yellow"))
    if report.coverage_error:
        out.print(text(f"coverage query failed: {report.coverage_error}", "bold red"))
    elif report.coverage_reported:
        out.print("")
        _coverage(report, out)


def _coverage(report: DriftReport, out: Console) -> None:
    """The coverage table: every status with its rows; a stranded one flagged on its row, never cut."""
    kinds = {c.kind for c in report.coverage}
    t = table("Work-query coverage" + (f" of {next(iter(kinds))} rows" if len(kinds) == 1 else ""))
    if len(kinds) > 1:
        t.add_column("kind", no_wrap=True)
    t.add_column("status", no_wrap=True)
    t.add_column("rows", justify="right", no_wrap=True)
    t.add_column("selected", no_wrap=True)
    t.add_column("terminal", no_wrap=True)
    t.add_column("owned by", overflow="fold")
    t.add_column("oldest", no_wrap=True)
    t.add_column("", no_wrap=True)
    for c in report.coverage:
        cells = [
            text(c.status, "bold" if c.stranded else ""),
            str(c.count),
            "yes" if c.selected else "no",
            "yes" if c.terminal else "no",
            text(c.owned_by or ""),
            age(c.oldest_age_seconds) if c.count else "",
            text("STRANDED", "bold red") if c.stranded else "",
        ]
        t.add_row(*([text(c.kind)] if len(kinds) > 1 else []), *cells)
    out.print(t)
    for c in report.coverage:
        if c.stranded:
            out.print(
                text(
                    f"{c.count} {c.kind} row{'s' if c.count != 1 else ''} stranded in {c.status}: no work query "
                    "selects this status, it is not terminal and nothing owns it (datum explain stranded)",
                    "bold red",
                )
            )


def summaries(rows: Sequence[ReconcilerSummary], out: Console, times: Times) -> None:
    """The list surface, in the page's order."""
    t = table()
    t.add_column("reconciler", overflow="fold")
    t.add_column("health", no_wrap=True)
    for col in ("drift", "blocked", "stranded"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("last ran", no_wrap=True)
    for r in rows:
        health = health_word(r)
        t.add_row(
            text(r.name), text(health, _HEALTH_STYLE.get(health, "dim")), str(r.drift), str(r.blocked),
            str(r.stranded) if r.coverage_reported else "-", times(r.last_ran_at),
        )
    out.print(t)


def needs_human(needs: Sequence[Any], out: Console, *, after: bool = False) -> None:
    """A "Needs a human" section: one row per line of the one decision (``datum.core.attention.decide``,
    what the page and ``GET /v1/attention`` show), its severity's words, its text and what to do;
    nothing when there is none. ``after``: it follows another section (a blank line first)."""
    if not needs:
        return
    from datum.core.attention import SEVERITY_LABEL

    if after:
        out.print("")
    out.print(text("Needs a human", "bold"))
    records(
        out,
        [Column("severity", whole=True), Column("what", fold=True)],
        [
            ([text(SEVERITY_LABEL[n.severity], "bold red" if n.severity.value == "look" else "yellow"), text(n.text)],
             lines(text(n.detail, "dim") if n.detail else None, text(n.do)))
            for n in needs
        ],
    )
    if not after:
        out.print("")


def call(value: Call | None) -> Text:
    """A host's call (``datum.core.attention.host_call``) in the words and colour of the page's badge."""
    if value is None:
        return text("")
    return text(call_label(value), _CALL_STYLE[value] if isinstance(value, Severity) else _ACT_STYLE[value])


def host_advice(host: Any, lines: Mapping[str, Need] | None = None) -> Call | None:
    """What a host row calls for, as the page's badge says (``datum.core.attention.host_call``): ``lines``, the
    lines of *Needs a human* by host (a host's line may come from its overdue reboot lease); without them, the
    line its own row gives."""
    line = lines.get(host.host) if lines is not None else host_need(host.dump())
    return host_call(host.state.value, host.reason, line)


def hosts(
    rows: Sequence[Any], counts: Mapping[str, int], out: Console, times: Times,
    advise: Callable[[Any], Call | None] = host_advice,
) -> None:
    """The fleet's counts, worst first, then a table of ``rows`` (``HostSummary``) in the order given."""
    total = sum(counts.values())
    summary(out, f"{total} host{'s' if total != 1 else ''}",
            [f"{s.value} {counts[s.value]}" for s in HOST_ORDER if counts.get(s.value)])
    if not rows:
        out.print("no host has reported a pass")
        return
    records(
        out,
        [Column("host", fold=True, most=40, whole=True), Column("state"), Column("advice", whole=True),
         Column("last pass")],
        [
            (
                [
                    text(h.host), text(h.state.value, _STATE_STYLE.get(h.state.value, "")),
                    call(advise(h)),
                    text(times(h.finished_at or h.updated_at)),
                ],
                text("; ".join(filter(None, [h.reason, h.held_back.said if h.held_back else None])), "dim")
                if h.reason or h.held_back else None,
            )
            for h in rows
        ],
    )


def tokens(rows: Sequence[Mapping[str, Any]], out: Console, times: Times) -> None:
    """The store's tokens, oldest first: id, principal, the host it is bound to, the host groups it is scoped to,
    when it was made."""
    if not rows:
        out.print("no token: datum token create --principal NAME makes one")
        return
    t = table()
    t.add_column("id", no_wrap=True)
    t.add_column("principal", overflow="fold")
    t.add_column("host", overflow="fold")
    t.add_column("groups", overflow="fold")
    t.add_column("created", no_wrap=True)
    for r in rows:
        groups = ",".join(r.get("groups") or []) or "all"
        t.add_row(text(r["id"]), text(r["principal"]), text(r["host"] or "any"), text(groups), times(r["createdAt"]))
    out.print(t)


def short_revision(rev: str) -> str:
    """A revision id cut for a table: 12 hex digits of its digest or commit (``--wide``: whole)."""
    if rev.startswith("sha256:"):
        return rev[:19]
    commit, dirty, rest = rev.partition("+dirty.")
    return commit[:12] + (dirty + rest if dirty else "")


def revisions(found: Any, out: Console, times: Times) -> None:
    """``datum rollout status``: a ``RevisionList``, newest first, the current one marked ``*`` and named whole."""
    if not found.revisions:
        out.print("no revision: [fleet] manifests is not set and no host reported one")
    else:
        t = table()
        t.add_column("", no_wrap=True)
        t.add_column("revision", overflow="fold")
        t.add_column("first seen", no_wrap=True)
        for header in ("hosts", "converged", "failed", "other"):
            t.add_column(header, justify="right", no_wrap=True)
        for r in found.revisions:
            t.add_row(
                text("*" if r.current else ""), text(r.id if times.wide else short_revision(r.id)), times(r.first_seen) if r.first_seen else text("never served"),
                str(r.hosts), str(r.converged), text(str(r.failed), "red" if r.failed else ""), str(r.other),
            )
        out.print(t)
    if found.current is not None:
        out.print(text(f"current: {found.current}"))
    if found.without:
        from datum.fleet.rollouts.status import without_said

        n = found.without
        out.print(text(f"{n} {'hosts' if n != 1 else 'host'}' last pass names no revision: ".replace("host'", "host's")
                       + "; ".join(without_said(found.without_by))))


def rollout(found: Any, out: Console, times: Times) -> None:
    """``datum rollout status``: the staged rollout in force (a ``RolloutStatus``), its waves, its failed hosts."""
    rev = found.revision if times.wide else short_revision(found.revision)
    head = text(f"rollout {found.id} of {rev}: ", "bold")
    head.append(found.state, rollout_style(found.state))
    if found.previous:
        head.append(f"  (from {found.previous if times.wide else short_revision(found.previous)})")
    out.print(head)
    if found.waves:
        t = table()
        for header in ("wave", "released", "hosts", "converged", "failed", "silent", "accepted"):
            t.add_column(header, justify="right" if header != "released" else "left", no_wrap=True)
        for w in found.waves:
            name = "canary" if w.wave == 0 else str(w.wave)
            t.add_row(name, "yes" if w.released else "no", str(w.hosts), str(w.converged),
                      text(str(w.failed), "red" if w.failed else ""), text(str(w.silent), "yellow" if w.silent else ""),
                      text(str(w.accepted), "yellow" if w.accepted else ""))
        out.print(t)
    if found.soak_ends_at is not None:
        out.print(text(f"soak ends: {times(found.soak_ends_at)}"))
    if found.by:
        from datum.fleet.rollouts.status import acted

        out.print(text(acted(found.transitions) or ""))
    if found.reason:
        out.print(text(f"reason: {found.reason}"))
    for f in found.failed or []:
        out.print(text(f"  failed: {f.host}: {f.reason}", "red"))
    for t in found.transitions:
        out.print(rollout_event(t, times, "  "))


def _why_moved(e: Any) -> Text | None:
    """A rollout event's second line: why, who (when not the server), the hosts it named."""
    said = " ".join(filter(None, [e.reason, f"(by {e.by})" if e.by != "server" else None,
                                  f"hosts: {', '.join(e.hosts[:10])}" if e.hosts else None]))
    return text(said, "dim") if said else None


def rollout_style(state: str) -> str:
    """How a rollout state is printed, from what the state means (``RolloutState``)."""
    from datum.core.vocab import RolloutState

    s = RolloutState(state)
    return "red" if s.bad else "yellow" if s.waits_for_human else "cyan" if s.under_way else "green" if s is RolloutState.DONE else "dim"


def rollout_event(e: Any, times: Times, indent: str = "") -> Text:
    """One transition of a rollout (a ``RolloutEvent``): when, what, who, why, the hosts it named."""
    line = text(f"{indent}{times(e.at)}  ")
    line.append(e.action.value + (f" wave {e.wave}" if e.action.value == "released" else ""), rollout_style(e.state))
    if e.by != "server":
        line.append(f" by {e.by}")
    if e.reason:
        line.append(f": {e.reason}")
    if e.hosts:
        shown = ", ".join(e.hosts[:5]) + (f" and {len(e.hosts) - 5} more" if len(e.hosts) > 5 else "")
        line.append(f" ({shown})", "dim")
    return line


def status(
    report: Mapping[str, Any], out: Console, times: Times, notes: Sequence[str] = (), line: Need | None = None
) -> None:
    """A host's persisted state: a header, the resources that need reading, then ``host state:`` and ``reason:``.
    ``line``: its line of *Needs a human* (``datum.core.attention.host_need``), which the header's call follows.

    The table lists the resources the last pass did not leave converged, or changed (with ``--wide``
    every one); the last two lines are the pass lines' (``datum apply``), wrapped to the width.
    """
    from datum.host.output import status_word

    host = str(report.get("host", ""))
    state = str(report.get("state", "unknown"))
    last = report.get("lastReport") or report
    head = text(f"host {host}: ", "bold")
    head.append(state, _STATE_STYLE.get(state, ""))
    if state != "converged":
        head.append("  ")
        head.append_text(call(host_call(state, report.get("reason"), line)))
    out.print(head)
    if "finishedAt" in last:
        said = [str(last.get("mode", "?")), f"exit {last.get('exitCode', '?')}"]
        if isinstance(last.get("durationSeconds"), int | float):
            said.append(f"{last['durationSeconds']:.2f}s")
        if last.get("incomplete"):
            said.append("incomplete")
        if last is not report:
            said.append("no longer current")
        out.print(text(f"last pass {times(last['finishedAt'])} ({', '.join(said)})"))
    for note in notes:
        out.print(text(f"note: {note}"))
    reboot = last.get("reboot")
    if isinstance(reboot, dict) and reboot.get("required"):
        out.print(text(f"reboot needed: {reboot.get('reason')}; {reboot.get('action') or 'no action recorded'}"))
    resources = [r for r in report.get("resources") or [] if isinstance(r, dict)]
    shown = resources if times.wide else [r for r in resources if r.get("state") != "converged" or r.get("changed")]
    rows = []
    for r in shown:
        word, _sep, why = status_word(r).partition(": ")
        rows.append(([text(str(r.get("id"))), text(word, _STATE_STYLE.get(str(r.get("state")), ""))],
                     text(why, "dim") if why else None))
    if rows:
        records(out, [Column("resource", fold=True), Column("state")], rows)
    hidden = len(resources) - len(shown)
    if hidden:
        out.print(text(f"{hidden} more resource{'s' if hidden != 1 else ''} converged, unchanged (--wide lists every one)", "dim"))
    out.print("")
    out.print(text(f"host state: {state}"))
    if report.get("reason") and state != "converged":
        out.print(text(f"reason: {report['reason']}"))


def _counted(counts: Mapping[str, int]) -> str:
    """``1 failed, 1 blocked, 3 converged``: a pass's resources by state, worst first."""
    order = ["failed", "blocked", "drifted", "skipped", "pending", "applying", "converged"]
    ranked = sorted(counts, key=lambda s: (order.index(s) if s in order else len(order), s))
    return ", ".join(f"{counts[s]} {s}" for s in ranked if counts[s]) or "no resources"


def passes(rows: Sequence[Any], out: Console, times: Times) -> None:
    """A host's kept passes (``PassSummary``), newest first: when the host finished each and when the server
    received it, the state it reported (``older``: it arrived after a newer one), its resources, and its
    number in the archive: short, never folded, what ``GET /v1/hosts/{host}/passes/{pass}`` and
    ``--json`` take (the agent's 36-character pass id is in ``--json``)."""
    if not rows:
        out.print("no pass of this host is kept in that window")
        return
    records(
        out,
        [Column("finished"), Column("state"), Column("resources", fold=True, most=36), Column("received"),
         Column("pass")],
        [
            (
                [
                    text(times(p.finished_at)),
                    text(p.state.value + (" (older)" if p.older else ""), _STATE_STYLE.get(p.state.value, "")),
                    text(_counted(p.counts)),
                    text(times(p.received_at)),
                    text(str(p.id)),
                ],
                text(p.reason, "dim") if p.reason else None,
            )
            for p in rows
        ],
    )


def events(rows: Sequence[Any], out: Console, times: Times) -> None:
    """The fleet's events (``PassEvent``), newest first: when, which host and resource, what was meant and
    what it reached, and why."""
    if not rows:
        out.print("no resource changed, failed, drifted or was blocked in that window, and no rollout moved")
        return
    records(
        out,
        [Column("finished"), Column("host", fold=True, most=24), Column("resource", fold=True, most=40),
         Column("action"), Column("state")],
        [
            (
                [
                    text(times(e.at)), text("(fleet)", "dim"), text(f"{e.resource} {short_revision(e.revision)}"),
                    text(e.action.value + (f" wave {e.wave}" if e.action.value == "released" else "")),
                    text(e.state.value, rollout_style(e.state.value)),
                ],
                _why_moved(e),
            ) if e.type == "rollout" else (
                [
                    text(times(e.finished_at)), text(e.host), text(e.resource), text(e.action.value),
                    text(e.state.value + (" (changed)" if e.changed and e.state.value != "converged" else ""),
                         _STATE_STYLE.get(e.state.value, "")),
                ],
                text(e.reason, "dim") if e.reason else None,
            )
            for e in rows
        ],
    )


def audit(rows: Sequence[Any], out: Console, times: Times) -> None:
    """The audit log (``AuditEntry``: its outcome an ``AuditOutcome``), newest first: when, who, what on what, and how it ended; under each, the
    request, where from, the token's id and the policies that decided."""
    if not rows:
        out.print("no audit row in that window")
        return
    records(
        out,
        [Column("seq"), Column("at"), Column("principal", fold=True, most=24), Column("action", fold=True, most=24),
         Column("resource", fold=True, most=30), Column("outcome")],
        [
            (
                [
                    text(str(e.seq) if e.seq is not None else "-", "" if e.seq is not None else "dim"), text(times(e.at)), text(e.principal or "(no token)"), text(e.action or "-"),
                    text(e.resource or "-"),
                    text(e.outcome + (f" {e.status}" if e.status is not None else ""), "bold red" if e.outcome.refusal else ""),
                ],
                text("  ".join(p for p in (
                    e.request, f"from {e.source}" if e.source else None, f"token {e.token_id}" if e.token_id else None,
                    f"policy {e.policy}" if e.policy else None, e.detail,
                ) if p), "dim"),
            )
            for e in rows
        ],
    )

"""What needs a human, and why: decided once, here, for every surface.

The page's *Needs a human*, ``GET /v1/attention``, the ``datum_needs_human``
gauge and the CLI (``datum status``, ``datum hosts``, ``datum drift``) each
render the list ``decide`` returns; none decides again. Two readings of one
situation would flicker: an item parked at the backoff cap is "at the backoff
cap" on the pass that retries it (reason ``apply_failed``) as on the passes
that wait it out (``backoff``), because the decision reads its failures, not
which of the two reasons this pass gave.

Each line has a ``severity``:

- ``look``: it will not clear by itself, someone has to act (the red *go and
  look* badge: every thing on a surface that carries it is a line here);
- ``check``: it may be intended (a host that skipped resources): check that it is.

and a ``reason`` from a closed set (``REASONS``, plus the drift reasons whose
explanation says go and look, and the plugins' reasons): the gauge's label.
What waits (an item in its first backoff windows, a reboot in the next
maintenance window, a reconciler before its first tick) and what was switched
off on purpose (a disabled reconciler) are not lines.

Pure: the JSON forms the API serves (a drift report, a ``/v1/hosts`` row or a
pass report, a reboot lease) in, lines out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from datum.core import budget
from datum.core.breaker import Threshold
from datum.core.explain import (
    ACT_LABEL,
    Act,
    Vocabulary,
    advice,
    at_backoff_cap,
    explain,
    host_explanation,
)
from datum.core.handreboot import awaits_hand
from datum.core.humanize import age, when
from datum.core.memory import BackoffPolicy
from datum.core.needwords import came_back_unhealthy, parked, stranded
from datum.core.vocab import (
    Direction,
    Health,
    HostState,
    Reason,
    RebootPolicy,
    RolloutState,
    item_words,
    plugin_reasons,
)


class Severity(StrEnum):
    """How a line needs its human."""

    LOOK = "look"
    CHECK = "check"


SEVERITY_LABEL = {Severity.LOOK: "go and look", Severity.CHECK: "check it is intended"}

# The reasons of the lines, in the order a human reads them (then the drift reasons' and plugins').
PLUGIN_BROKEN = "plugin_broken"
RECONCILER_FAILING = "reconciler_failing"
RECONCILER_DEGRADED = "reconciler_degraded"
BACKOFF_CAP = "backoff_cap"
STRANDED = "stranded"
HOST_FAILED = "host_failed"
HOST_UNKNOWN = "host_unknown"
MANUAL_REBOOT = "manual_reboot"
REBOOT_REFUSED = "reboot_refused"
NO_REBOOT_LEASE = "no_reboot_lease"
PRE_REBOOT_FAILED = "pre_reboot_failed"
REBOOT_OVERDUE = "reboot_overdue"
HOST_UNHEALTHY = "host_unhealthy"
HOST_DRIFTED = "host_drifted"
REPEATED_FAILURES = "repeated_failures"
HOST_DEGRADED = "host_degraded"
ROLLOUT_HALTED = "rollout_halted"
ROLLOUT_PAUSED = "rollout_paused"
FLEET_DIRECTORY = "fleet_directory_unavailable"

_OWN: dict[str, Severity] = {
    FLEET_DIRECTORY: Severity.LOOK,  # no host is served a manifest, no rollout starts
    ROLLOUT_HALTED: Severity(RolloutState.HALTED.severity),  # the fleet's changes stop until someone answers
    ROLLOUT_PAUSED: Severity(RolloutState.PAUSED.severity),
    PLUGIN_BROKEN: Severity.LOOK,
    RECONCILER_FAILING: Severity.LOOK,
    RECONCILER_DEGRADED: Severity.LOOK,
    BACKOFF_CAP: Severity.LOOK,
    STRANDED: Severity.LOOK,
    HOST_FAILED: Severity.LOOK,
    HOST_UNKNOWN: Severity.LOOK,
    MANUAL_REBOOT: Severity.LOOK,
    REBOOT_REFUSED: Severity.LOOK,
    NO_REBOOT_LEASE: Severity.LOOK,
    PRE_REBOOT_FAILED: Severity.LOOK,
    REBOOT_OVERDUE: Severity.LOOK,
    HOST_UNHEALTHY: Severity.LOOK,
    HOST_DRIFTED: Severity.LOOK,
    REPEATED_FAILURES: Severity.LOOK,
    HOST_DEGRADED: Severity.CHECK,
}
# Item reasons that are a line of their own kind: their explanation says go and look, whatever the item.
_LOOK_REASONS = [r for r in Reason if explain(Vocabulary.REASON, r).act is Act.LOOK]
_FAILING = (Reason.BACKOFF, Reason.APPLY_FAILED)
# The group of failing items that retry by themselves (failed once or twice): no line, the page groups them.
RETRYING = "retrying"


def reasons() -> dict[str, Severity]:
    """Every reason a line can have, with its severity, in reading order: the gauge's series."""
    out = dict(_OWN)
    del out[HOST_DEGRADED]
    out.update({r.value: Severity.LOOK for r in _LOOK_REASONS})
    out.update({r.value: Severity.LOOK for r in plugin_reasons()})
    out[HOST_DEGRADED] = Severity.CHECK
    return out


@dataclass(frozen=True)
class Need:
    """One line of *Needs a human*: about a reconciler (and some of its items) or a host."""

    severity: Severity
    reason: str
    text: str
    do: str
    reconciler: str | None = None
    host: str | None = None
    ids: tuple[str, ...] = ()  # the items (``kind/id``) or coverage rows (``kind/status``) it names
    direction: Direction | None = None
    detail: str = ""

    @classmethod
    def from_json(cls, line: Mapping[str, Any]) -> Need:
        """A line in the API's form (``to_json``) back, as a client of ``GET /v1/attention`` reads it."""
        direction = line.get("direction")
        return cls(
            Severity(line["severity"]), str(line["reason"]), str(line["text"]), str(line["do"]),
            reconciler=line.get("reconciler"), host=line.get("host"), ids=tuple(line.get("ids") or ()),
            direction=Direction(direction) if direction is not None else None, detail=str(line.get("detail") or ""),
        )

    def to_json(self) -> dict[str, Any]:
        """The API's form (``GET /v1/attention``): fields that do not apply are absent."""
        out: dict[str, Any] = {"severity": self.severity.value, "reason": self.reason}
        if self.reconciler is not None:
            out["reconciler"] = self.reconciler
        if self.host is not None:
            out["host"] = self.host
        if self.ids:
            out["ids"] = list(self.ids)
        if self.direction is not None:
            out["direction"] = self.direction.value
        out["text"] = self.text
        if self.detail:
            out["detail"] = self.detail
        out["do"] = self.do
        return out


@dataclass(frozen=True)
class Reconciler:
    """What the decision reads of one reconciler.

    ``report``: its drift report in JSON form (a list-surface row works too: no items, no coverage).
    ``backoff`` and ``breaker``: its configured policy (``ReconcilerSettings.converge_config()``).
    ``broken``: why its plugin did not load, when it did not.
    """

    report: Mapping[str, Any]
    enabled: bool = True
    backoff: BackoffPolicy | None = None
    breaker: Mapping[Direction, Threshold] = field(default_factory=dict)
    broken: str | None = None

    @property
    def name(self) -> str:
        return str(self.report.get("reconciler") or self.report.get("name") or "")


# -- items --------------------------------------------------------------------------------


def item_reason(item: Mapping[str, Any], backoff: BackoffPolicy | None) -> str | None:
    """The reason of the line an item belongs to, or None when it is not a human's (yet).

    A failing item (``backoff`` or ``apply_failed``) reads its failures, so the pass that retries it and
    the passes that wait it out give the same answer.
    """
    raw = str(item.get("reason"))
    failures = item.get("failures")
    failures = failures if isinstance(failures, int) and not isinstance(failures, bool) else None
    try:
        reason: Any = Reason(raw)
    except ValueError:
        return raw if raw in {str(r) for r in plugin_reasons()} or "." in raw else None
    if reason in _FAILING:
        if at_backoff_cap(reason, failures, backoff):
            return BACKOFF_CAP
        return REPEATED_FAILURES if advice(reason, failures, backoff) is Act.LOOK else None
    return reason.value if reason in _LOOK_REASONS else None


def group_key(item: Mapping[str, Any], backoff: BackoffPolicy | None) -> str:
    """Which group an item sits in where items are grouped (the page): its line's reason when it has a line,
    ``RETRYING`` for a failing item that is not a human's yet, else its own reason. Stable pass after pass."""
    why = item_reason(item, backoff)
    if why is not None:
        return why
    reason = str(item.get("reason"))
    return RETRYING if reason in (Reason.BACKOFF.value, Reason.APPLY_FAILED.value) else reason


def key(item: Mapping[str, Any]) -> str:
    """An item as every surface names it: ``kind/id``."""
    return f"{item.get('kind')}/{item.get('id')}"


def _plural(direction: Direction, n: int) -> str:
    return f"{n} {direction.value}{'s' if n != 1 else ''}"


def breaker_words(direction: Direction, threshold: Threshold | None) -> str:
    """``breaker reap > 10 or > 10% of what exists``: a direction's breaker as configured."""
    bound = []
    if threshold is not None and threshold.count is not None:
        bound.append(f"> {threshold.count}")
    if threshold is not None and threshold.fraction is not None:
        bound.append(f"> {threshold.fraction:.0%} of what exists")
    return f"breaker {direction.value} {' or '.join(bound) or 'tripped'}"


NAMED = 3  # the items a group's phrase names; the rest are counted


def named(ids: Sequence[str]) -> str:
    """``db1, db2, db3 and 7 more``: a group's items by their ids (``kind/id`` without the kind)."""
    shown = ", ".join(i.partition("/")[2] or i for i in ids[:NAMED])
    return shown + (f" and {len(ids) - NAMED} more" if len(ids) > NAMED else "")


def _own_words(reconciler: str, reason: str, direction: Direction, n: int, ids: Sequence[str]) -> str | None:
    """The phrase the reconciler's plugin gave this group (``ReconcilerPlugin.items``): by its reason, else, for a
    reason with no words of its own here, by its direction; None when it gave none."""
    phrase = item_words(reconciler, reason) if reconciler else None
    if phrase is None and reconciler and reason not in _LABELLED:
        phrase = item_words(reconciler, direction.value)
    if phrase is None:
        return None
    return phrase[n != 1].format(n=n, names=named(ids) or f"{n} items")


# The reasons whose groups the framework words itself (a reconciler's phrase for the reason still comes first).
_LABELLED = {Reason.CIRCUIT_BREAKER.value, BACKOFF_CAP, REPEATED_FAILURES, Reason.BLOCKED_ON_OWNER.value,
             Reason.AWAITING_CONFIRMATION.value, RETRYING, Reason.BACKOFF.value, Reason.APPLY_FAILED.value}


def group_label(reason: str, direction: Direction, n: int, breaker: Threshold | None = None,
                reconciler: str = "", ids: Sequence[str] = ()) -> str:
    """How a group of ``n`` items that share a line's reason reads (the page's groups say the same): the phrase
    ``reconciler``'s plugin gave it, naming ``ids`` (``kind/id``), when it gave one."""
    own = _own_words(reconciler, reason, direction, n, ids)
    if own is not None:
        return own
    if reason == Reason.CIRCUIT_BREAKER.value:
        return f"{_plural(direction, n)} held: {breaker_words(direction, breaker)}"
    if reason == BACKOFF_CAP:
        return parked(_plural(direction, n))
    if reason == REPEATED_FAILURES:
        return f"{_plural(direction, n)} failing again and again"
    if reason == Reason.BLOCKED_ON_OWNER.value:
        return f"{_plural(direction, n)} waiting on their owners"
    if reason == Reason.AWAITING_CONFIRMATION.value:
        return f"{_plural(direction, n)} awaiting confirmation"
    if reason in (RETRYING, Reason.BACKOFF.value, Reason.APPLY_FAILED.value):
        return f"{_plural(direction, n)} failed, retrying"
    return f"{_plural(direction, n)}: {reason}"


def _explanation_do(reason: str) -> tuple[str, str]:
    try:
        e = explain(Vocabulary.REASON, reason)
    except KeyError:
        return "", "Go and look at the item's lastErr, and at its plugin's documentation."
    return e.summary, e.do


def _failures(item: Mapping[str, Any]) -> int:
    n = item.get("failures")
    return n if isinstance(n, int) and not isinstance(n, bool) else 0


def _times(n: int) -> str:
    return "once" if n == 1 else "twice" if n == 2 else f"{n} times"


def _items(r: Reconciler) -> list[Need]:
    name = r.name
    out: list[Need] = []
    groups: dict[tuple[str, Direction], list[Mapping[str, Any]]] = {}
    for item in r.report.get("items") or []:
        why = item_reason(item, r.backoff)
        if why is None:
            continue
        direction = Direction(item.get("direction"))
        if why in (BACKOFF_CAP, REPEATED_FAILURES):  # one line per item: each has its own error and count
            n = _failures(item)
            text = (
                parked(f"{key(item)} ({name}) is") + f" after {n} failures"
                if why == BACKOFF_CAP
                else f"{key(item)} ({name}) has failed {_times(n)} in a row"
            )
            do = (
                "It will not fix itself: remove the cause lastErr names; the next retry then converges."
                if why == BACKOFF_CAP
                else "Failures are climbing: look at lastErr and remove the cause before it parks at the backoff cap."
            )
            out.append(Need(_OWN[why], why, text, do, reconciler=name, ids=(key(item),), direction=direction,
                            detail=str(item.get("lastErr") or "")))
            continue
        groups.setdefault((why, direction), []).append(item)
    for (why, direction), items in groups.items():
        summary, do = _explanation_do(why)
        label = group_label(why, direction, len(items), r.breaker.get(direction), name, [key(i) for i in items])
        detail = summary
        if why == Reason.CIRCUIT_BREAKER.value and items[0].get("lastErr"):
            detail = str(items[0]["lastErr"])
        out.append(Need(Severity.LOOK, why, f"{label} ({name})", do, reconciler=name,
                        ids=tuple(key(i) for i in items), direction=direction, detail=detail))
    return out


def _reconciler(r: Reconciler) -> list[Need]:
    name, report = r.name, r.report
    if r.broken is not None:
        return [Need(Severity.LOOK, PLUGIN_BROKEN, f"reconciler plugin {name} did not load",
                     "Fix the plugin's installation (datum reconcilers names the error): until it loads, nothing "
                     "of it runs.", reconciler=name, detail=r.broken)]
    if not r.enabled:
        return []  # switched off on purpose: nothing of it runs, nothing of it is a human's
    out: list[Need] = []
    health = str(report.get("health"))
    error = str(report.get("error") or "")
    if health == Health.FAILING.value:
        out.append(Need(Severity.LOOK, RECONCILER_FAILING, f"{name} is failing",
                        explain(Vocabulary.HEALTH, Health.FAILING).do, reconciler=name, detail=error))
    elif health == Health.DEGRADED.value and error:  # the reconciler said why itself (Result.degraded)
        out.append(Need(Severity.LOOK, RECONCILER_DEGRADED, f"{name} is degraded",
                        "Go and look at what the reconciler says (its error), and at its items.",
                        reconciler=name, detail=error))
    out += _items(r)
    for c in report.get("coverage") or []:
        if c.get("stranded"):
            n = int(c.get("count") or 0)
            out.append(Need(
                Severity.LOOK, STRANDED,
                stranded(n, c.get("kind"), c.get("status"), name),
                "No work query selects this status and nothing owns it: nothing will move these rows. Move them "
                "to a status something selects, or teach the reconciler this status.",
                reconciler=name, ids=(f"{c.get('kind')}/{c.get('status')}",),
                detail=f"the oldest for {age(float(c.get('oldestAgeSeconds') or 0))}",
            ))
    return out


# -- hosts --------------------------------------------------------------------------------


def reboot_do(host: str, reboot: Mapping[str, Any] | None) -> str:
    """What to do about a host's pending reboot, by its policy (the host page says the same)."""
    reboot = reboot or {}
    policy = reboot.get("policy")
    if policy == RebootPolicy.MANUAL.value:
        return f"Reboot it: run datum reboot on {host} (reboot_policy manual); it stays awaiting-reboot until then."
    if policy == RebootPolicy.NEVER.value:
        return (f"Reboot it by hand when it suits you: Datum never reboots it (reboot_policy never); datum reboot "
                f"on {host} does it and records the request.")
    if policy == RebootPolicy.MAINTENANCE.value:
        return "Wait: it reboots in its next maintenance window, when its group's reboot budget has a slot."
    if policy == RebootPolicy.AUTOMATIC.value:
        return "Wait: it reboots at its next pass, when its group's reboot budget has a slot."
    return explain(Vocabulary.HOST_STATE, HostState.AWAITING_REBOOT).do


def _host(h: Mapping[str, Any]) -> Need | None:
    name = str(h.get("host") or "")
    state = str(h.get("state"))
    reason = str(h.get("reason") or "")
    if state == HostState.FAILED.value:
        return Need(Severity.LOOK, HOST_FAILED, f"host {name} failed",
                    explain(Vocabulary.HOST_STATE, HostState.FAILED).do, host=name, detail=reason)
    if state == HostState.UNKNOWN.value:
        text = f"host {name} fell silent" if h.get("stale") else f"host {name} is unknown"
        return Need(Severity.LOOK, HOST_UNKNOWN, text, explain(Vocabulary.HOST_STATE, HostState.UNKNOWN).do,
                    host=name, detail=reason)
    if state == HostState.DRIFTED.value:
        return Need(Severity.LOOK, HOST_DRIFTED, f"host {name} drifted (observe mode)",
                    explain(Vocabulary.HOST_STATE, HostState.DRIFTED).do, host=name, detail=reason)
    if state == HostState.DEGRADED.value and reason.startswith(budget.UNHEALTHY):
        return Need(Severity.LOOK, HOST_UNHEALTHY, came_back_unhealthy(name),
                    f"Go and look at the host's service: its health check (or post_reboot) has failed at every pass "
                    f"since its reboot, and it reads degraded until one passes. Its group's next reboot waits on "
                    f"it meanwhile (datum reboots clear {name} lets the group go on; the host stays here until "
                    "healthy).", host=name, detail=reason)
    if state == HostState.DEGRADED.value:
        return Need(Severity.CHECK, HOST_DEGRADED, f"host {name} skipped resources",
                    explain(Vocabulary.HOST_STATE, HostState.DEGRADED).do, host=name, detail=reason)
    if state != HostState.AWAITING_REBOOT.value:
        return None
    found = h.get("reboot")
    reboot: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    policy = reboot.get("policy")
    if reboot.get("attempted"):  # rebooted for this kernel once and came back to another: no policy reboots again
        return Need(Severity.LOOK, REBOOT_REFUSED, f"host {name} came back from its reboot to the old kernel",
                    "Make the newer kernel the default boot entry, or remove it; Datum does not reboot for it again.",
                    host=name, detail=reason)
    if awaits_hand(state, reboot) is not None:  # the rule /metrics and its alert use too
        return Need(Severity.LOOK, MANUAL_REBOOT, f"host {name} awaits a reboot by hand (reboot_policy {policy})",
                    reboot_do(name, reboot), host=name, detail=reason)
    if reason.startswith(budget.NO_LEASE):
        return Need(Severity.LOOK, NO_REBOOT_LEASE, f"host {name} cannot get a reboot lease",
                    explain(Vocabulary.HOST_REASON, "no_reboot_lease").do, host=name, detail=reason)
    if reason.startswith(budget.PRE_REBOOT_FAILED):
        return Need(Severity.LOOK, PRE_REBOOT_FAILED, f"host {name} does not reboot: its pre_reboot hook fails",
                    explain(Vocabulary.HOST_REASON, "pre_reboot_failed").do, host=name, detail=reason)
    return None


def host_need(host: Mapping[str, Any]) -> Need | None:
    """The line of one host (a ``/v1/hosts`` row, ``GET /v1/hosts/{host}`` or a pass report), or None."""
    return _host(host)


Call = Severity | Act  # what a host calls for: a line's severity, or what its state asks when it has no line


def host_call(state: str, reason: str | None, line: Need | None) -> Call | None:
    """What a host calls for, one answer for every surface (the page's badge beside it, ``datum hosts``' advice
    column, ``datum status``' head): its line's severity when *Needs a human* lists it (``line``: the one
    ``decide`` or ``host_need`` gave it); nothing when converged; else what its reason or state calls for
    (``datum.core.explain.host_explanation``), never ``go and look``, which only a line says: a host that waits
    on another (its group's reboots halted by a host not back, a maintenance window) waits."""
    if line is not None:
        return line.severity
    if state == HostState.CONVERGED.value:
        return None
    act = host_explanation(state, reason).act
    return Act.WAIT if act in (Act.LOOK, Act.DEPENDS) else act


def call_label(call: Call) -> str:
    """How every surface words a call: ``go and look``, ``check it is intended``, ``wait``, ..."""
    return SEVERITY_LABEL[call] if isinstance(call, Severity) else ACT_LABEL[call]


def _time(value: Any) -> str:
    """An RFC 3339 time as every surface prints it (``2026-11-29 23:49:10 UTC``); as given if it is not one."""
    try:
        return when(datetime.fromisoformat(str(value)).astimezone(UTC))
    except ValueError:
        return str(value)


def _overdue(lease: Mapping[str, Any]) -> Need:
    """An overdue lease's line: its host did not come back, or came back unhealthy (it reported from its new
    boot, not converged and healthy: ``datum.core.budget.back_unhealthy``, kept on the lease)."""
    name, group = str(lease.get("host")), lease.get("group")
    unhealthy = lease.get("unhealthy")
    if unhealthy:
        title, how = (f"group {group}'s reboots are halted: {came_back_unhealthy(name)}",
                      "it reported from its new boot, but not converged with its health check and post_reboot passed")
        what = f"; it {unhealthy}"
    else:
        title, how = (f"host {name} has not come back from its reboot",
                      "it took its reboot slot and has not reported from a new boot since")
        what = " with no report from a new boot"
    return Need(
        Severity.LOOK, REBOOT_OVERDUE, title,
        f"Go and look at the host: {how}. Its group's reboots are halted until it does, or until datum reboots "
        f"clear {name}.",
        host=name,
        detail=f"its reboot lease of group {group} (since {_time(lease.get('since'))}) expired at "
        f"{_time(lease.get('expiresAt'))}{what}; group {group} is halted",
    )


# -- the decision -------------------------------------------------------------------------


SHOWN_HOSTS = 5  # failed hosts a halted rollout's line names; the rest are counted


def _rollout(ro: Mapping[str, Any]) -> Need | None:
    """A halted or paused rollout (``datum.store.rollouts.RolloutRow``'s fields): the fleet's changes wait
    for a human, who has two ways out. None for a rollout in any other state."""
    state, number, revision = ro.get("state"), ro.get("id"), ro.get("revision")
    if state not in RolloutState._value2member_map_ or not RolloutState(str(state)).waits_for_human:
        return None
    ways = f"datum rollout resume (the waves go on) or datum rollout abort (revision {ro.get('previous')} again)"
    if state == RolloutState.HALTED:
        failed = [str(f.get("host")) for f in ro.get("failed") or []]
        named = ", ".join(failed[:SHOWN_HOSTS]) + (f" and {len(failed) - SHOWN_HOSTS} more" if len(failed) > SHOWN_HOSTS else "")
        text = f"rollout {number} of {revision} halted: {len(failed)} host{'s' if len(failed) != 1 else ''} failed on it"
        return Need(Severity.LOOK, ROLLOUT_HALTED, text + (f" ({named})" if named else ""),
                    f"Look at why they failed (datum hosts --state failed), then {ways}; nothing is released "
                    "meanwhile.", ids=tuple(failed), detail=str(ro.get("reason") or ""))
    by = f" by {ro['by']}" if ro.get("by") else ""
    return Need(Severity.LOOK, ROLLOUT_PAUSED, f"rollout {number} of {revision} is paused{by}",
                f"When ready, {ways}; nothing is released meanwhile.", detail=str(ro.get("reason") or ""))


def canary_said(rollout: Mapping[str, Any] | None, host: str, runs: str | None) -> str | None:
    """How the canary's line and its host page say it is the canary: ``the canary of rollout 7: runs revision A,
    is served revision B``; None when ``host`` is none of ``rollout``'s ``canaries`` (the hosts of wave 0 of a
    rollout under way: ``datum.fleet.rollouts.canaries``). ``runs``: the revision its last pass ran."""
    if rollout is None or host not in (rollout.get("canaries") or ()):
        return None
    ran = f"runs revision {runs}" if runs else "has run no revision of the fleet yet"
    return f"the canary of rollout {rollout.get('id')}: {ran}, is served revision {rollout.get('revision')}"


def _as_canary(line: Need, host: Mapping[str, Any], rollout: Mapping[str, Any] | None) -> Need:
    """A host's line, saying it is the canary of ``rollout`` when it is one, and what holds while it fails."""
    said = canary_said(rollout, str(line.host), host.get("revision") if isinstance(host.get("revision"), str) else None)
    if said is None or rollout is None:
        return line
    do = line.do
    state = str(rollout.get("state"))
    if state in RolloutState._value2member_map_ and RolloutState(state).waits_for_human:
        do += (f" Rollout {rollout.get('id')} is {rollout.get('state')} meanwhile: nothing more is released until "
               "datum rollout resume or datum rollout abort.")
    else:
        do += f" Rollout {rollout.get('id')} waits on its canaries before its first wave."
    return replace(line, text=f"{line.text} (the canary of rollout {rollout.get('id')})", do=do,
                   detail="; ".join(filter(None, [said, line.detail])))


def decide(
    reconcilers: Iterable[Reconciler] = (),
    hosts: Iterable[Mapping[str, Any]] = (),
    overdue: Iterable[Mapping[str, Any]] = (),
    rollout: Mapping[str, Any] | None = None,
    fleet_directory: str | None = None,
) -> list[Need]:
    """Every line of *Needs a human*, in reading order: ``look`` first, then by reason, then as given.

    ``hosts``: ``/v1/hosts`` rows (or ``GET /v1/hosts/{host}`` answers, or pass reports); ``overdue``: reboot
    leases past their timeout (``GET /v1/reboots``'s ``overdue``); ``rollout``: the staged rollout in force
    (a halted or paused one is a line; with its ``canaries``, a canary's line says it is one);
    ``fleet_directory``: why the fleet directory cannot be served from (``datum.fleet.effective.unavailable``).
    """
    lines: list[Need] = []
    if fleet_directory:
        lines.append(Need(
            Severity.LOOK, FLEET_DIRECTORY, fleet_directory,
            "Put the directory back (the clone, the deploy's link) or fix [fleet] manifests: until then no host is "
            "served a manifest (each keeps the one it has, its manifest request answered 503) and no rollout "
            "starts; the server serves it again within a second of its return.",
        ))
    held = _rollout(rollout) if rollout is not None else None
    if held is not None:
        lines.append(held)
    for r in reconcilers:
        lines += _reconciler(r)
    for h in hosts:
        line = _host(h)
        if line is not None:
            lines.append(_as_canary(line, h, rollout))
    lines += [_overdue(lease) for lease in overdue]
    return ordered(lines)


def ordered(lines: Iterable[Need]) -> list[Need]:
    """``lines`` in reading order: ``look`` first, then by reason (``reasons``), then as given."""
    order = {reason: n for n, reason in enumerate(reasons())}
    return sorted(lines, key=lambda n: (n.severity is not Severity.LOOK, order.get(n.reason, len(order))))


def counts(lines: Sequence[Need]) -> Counter[tuple[str, str]]:
    """The lines by (severity, reason): what the gauge says."""
    return Counter((n.severity.value, n.reason) for n in lines)

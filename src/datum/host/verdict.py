"""One verdict: a pass's frozen outcomes made into the host's state, its reason, the exit code and
the pass report.

Every surface that says where a host stands shows what this module made, never a judgement of
its own: the lines and ``--json`` of ``datum apply`` and ``datum plan``, the report stored in
the state file (``datum status``), the one ``--report-to`` and ``datum agent`` post, and the
API, which reads it as the ``PassReport`` model (``datum.host.report``: its schema; a test holds
every form made here to it). Reports are built here as their JSON form: the model's pydantic
is not imported on a pass.

Pure: it reads no clock, file or host. The engine hands it what the pass found (the outcomes,
the reboot the host needs, the signal that stopped it, the times).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from datum.core import budget, hostreasons
from datum.core.rollup import called_for, host_state
from datum.core.vocab import HostState, ResourceState

if TYPE_CHECKING:
    from datum.host.executor import Outcome

# The contract's exit codes of ``apply`` and ``plan``: bit flags, OR-ed. "Changed" is the pass's; the others are
# the bits of the host states the pass calls for (``HostState.exit_bit``).
EXIT_CHANGED = 2
EXIT_FAILED = HostState.FAILED.exit_bit  # also: the host state is not known (a pass stopped part-way, no manifest)
EXIT_DRIFTED = HostState.DRIFTED.exit_bit
EXIT_REBOOT = HostState.AWAITING_REBOOT.exit_bit
EXIT_DEGRADED = HostState.DEGRADED.exit_bit


@dataclass(frozen=True, slots=True)
class Verdict:
    """Where a pass left the host: its state, why (unless converged), the exit code, and whether
    the pass was stopped before it reached every resource."""

    state: HostState
    reason: str | None
    exit_code: int
    incomplete: bool = False


def decide(
    outcomes: Sequence[Outcome],
    *,
    reboot_reason: str | None = None,
    stopped_by: str | None = None,
    health: Mapping[str, Any] | None = None,
) -> Verdict:
    """The verdict of a pass over ``outcomes``.

    ``reboot_reason``: why the host awaits a reboot (None: it does not). ``stopped_by``: the
    signal that stopped the walk; with resources left ``pending`` the host state is not known.
    ``health``: the report's ``health`` (``datum.host.hooks``: back from a reboot under a lease, the
    health check and ``post_reboot``); one that did not pass makes the host ``degraded``, saying why.
    """
    sick = budget.unhealthy(health)
    states = [o.state for o in outcomes]
    found = {"awaiting_reboot": reboot_reason is not None, "unhealthy": sick is not None}
    code = _changed(outcomes) | bits(called_for(states, **found))
    if stopped_by is not None and incomplete(outcomes, stopped_by):
        return Verdict(HostState.UNKNOWN, stopped_reason(stopped_by, outcomes), code | EXIT_FAILED, True)
    state = host_state(states, **found)
    return Verdict(state, reason_for(state, outcomes, reboot_reason, sick), code)


def incomplete(outcomes: Sequence[Outcome], stopped_by: str | None) -> bool:
    """Whether a signal stopped the walk before it reached every resource."""
    return stopped_by is not None and any(o.state is ResourceState.PENDING for o in outcomes)


def no_pass(why: str) -> Verdict:
    """The verdict when no pass could run (``datum agent`` with no manifest to apply)."""
    return Verdict(HostState.UNKNOWN, why, EXIT_FAILED, True)


def bits(called: Iterable[HostState]) -> int:
    """The exit bits of the host states a pass calls for (``datum.core.rollup.called_for``), OR-ed."""
    code = 0
    for state in called:
        code |= state.exit_bit
    return code


def _changed(outcomes: Sequence[Outcome]) -> int:
    return EXIT_CHANGED if any(o.changed for o in outcomes) else 0


def _names(outs: Sequence[Outcome], what: str, limit: int = 3) -> str:
    shown = [f"{o.id} {what}" + (f": {o.reason}" if o.reason else "") for o in outs[:limit]]
    more = len(outs) - limit
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def reason_for(
    state: HostState, outcomes: Sequence[Outcome], reboot_reason: str | None, unhealthy: str | None = None
) -> str | None:
    """The host state's reason, naming the resources behind it (None when converged); a ``degraded`` host
    back from a reboot ``unhealthy`` (``datum.core.budget.unhealthy``) says that first."""

    def by(s: ResourceState) -> list[Outcome]:  # asked for the state behind the host's only
        return [o for o in outcomes if o.state is s]

    if state is HostState.FAILED:
        failed = _names(by(ResourceState.FAILED), "failed")
        blocked = by(ResourceState.BLOCKED)
        if blocked:
            ids = ", ".join(o.id for o in blocked[:3]) + (
                f" and {len(blocked) - 3} more" if len(blocked) > 3 else ""
            )
            failed += f"{hostreasons.BLOCKED}{ids}"
        return failed
    if state is HostState.DRIFTED:
        return _names(by(ResourceState.DRIFTED), "drifted")
    if state is HostState.AWAITING_REBOOT:
        return reboot_reason
    if state is HostState.DEGRADED:
        skipped = by(ResourceState.SKIPPED)
        return "; ".join(filter(None, [unhealthy, _names(skipped, "skipped") if skipped else None]))
    return None


def stopped_reason(signal: str, outcomes: Sequence[Outcome]) -> str:
    """Why a pass stopped part-way is ``unknown``: the signal, how far it came, what failed."""
    pending = [o for o in outcomes if o.state is ResourceState.PENDING]
    done = len(outcomes) - len(pending)
    why = hostreasons.stopped(signal, done, len(outcomes))
    for state in (ResourceState.FAILED, ResourceState.BLOCKED):
        bad = [o for o in outcomes if o.state is state]
        why += f"; {_names(bad, state.value)}" if bad else ""
    return why


def resource_report(o: Outcome) -> dict[str, Any]:
    """One resource's part of the report (``ResourceReport``): absent fields absent."""
    out: dict[str, Any] = {
        "id": o.id,
        "type": o.resource.type,
        "name": o.resource.name,
        "action": o.action.value,
        "state": o.state.value,
        "changed": o.changed,
        "durationSeconds": round(o.duration_seconds, 6),
    }
    for key, value in (
        ("reason", o.reason),
        ("error", o.error),
        ("blockedBy", list(o.blocked_by) if o.blocked_by is not None else None),
        ("diff", o.diff),
        ("sensitive", True if o.sensitive else None),
        ("rebootRequired", o.reboot_required),
    ):
        if value is not None:
            out[key] = value
    return out


def report(
    verdict: Verdict,
    outcomes: Sequence[Outcome],
    *,
    host: str,
    mode: str,
    started: str,
    finished: str,
    duration: float | str,
    manifest: str | None = None,
    boot_id: str = "",
    reboot: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The pass report of ``verdict`` over ``outcomes`` (``PassReport``'s JSON form), its fields in
    the order they are stored. ``datum.host.idle`` makes its template here, with numbered slots
    for the times (strings) that an idle pass fills."""
    out: dict[str, Any] = {
        "host": host,
        "mode": mode,
        "state": verdict.state.value,
        "startedAt": started,
        "finishedAt": finished,
        "durationSeconds": duration,
    }
    if manifest is not None:
        out["manifest"] = manifest
    out["exitCode"] = verdict.exit_code
    out["counts"] = dict(Counter(o.state.value for o in outcomes))
    out["resources"] = [resource_report(o) for o in outcomes]
    if verdict.incomplete:
        out["incomplete"] = True
    if verdict.reason:
        out["reason"] = verdict.reason
    if boot_id:
        out["bootId"] = boot_id
    if reboot:
        out["reboot"] = reboot
    out.update(extra or {})
    return out


def unknown(host: str, why: str) -> dict[str, Any]:
    """What ``datum status`` shows where there is no report to read: the host ``unknown``, and why."""
    return {"host": host, "state": HostState.UNKNOWN.value, "reason": why}

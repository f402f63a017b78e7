"""One agent run end to end: validate, lock, pass, roll up, persist, then report and reboot.

The order is the contract's: nothing is touched before the whole manifest is
valid; the report is persisted before it is posted and before any reboot.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datum.core.rollup import host_state
from datum.core.vocab import HostState, Mode, ResourceState
from datum.host.compiled import HostConfig
from datum.host.executor import Outcome, Progress, run_pass
from datum.host.model import Manifest
from datum.host.statefile import Held, StateStore, Unreadable, unfinished, unfinished_reason
from datum.providers.base import HostContext
from datum.providers.value import Value

if TYPE_CHECKING:
    from datum.host.reboot import Slot

EXIT_CHANGED = 2
EXIT_FAILED = 4
EXIT_DRIFTED = 8
EXIT_REBOOT = 16
EXIT_DEGRADED = 32


class PassResult(Value):
    """What a run produced: the report (JSON form), its outcomes and the reboot decision."""

    __slots__ = ("report", "outcomes", "exit_code", "reboot_now", "warnings")
    report: dict[str, Any]
    outcomes: list[Outcome]
    exit_code: int
    reboot_now: bool
    warnings: list[str]

    def __init__(
        self,
        report: dict[str, Any],
        outcomes: list[Outcome],
        exit_code: int,
        reboot_now: bool = False,
        warnings: list[str] | None = None,
    ) -> None:
        self.report = report
        self.outcomes = outcomes
        self.exit_code = exit_code
        self.reboot_now = reboot_now
        self.warnings = [] if warnings is None else warnings


def real_root(root: str) -> Path:
    """``--root`` resolved once (a symlinked root: every write under its target); a Problem
    when it is not a directory, raised before any lock is taken."""
    found = Path(os.path.realpath(root))
    if not found.is_dir():
        from datum.core.findings import Problem

        raise Problem.one("INVALID_INPUT", f"--root {root} is not a directory")
    return found


def host_name(config: HostConfig) -> str:
    from datum.providers.facts import node_name  # a read the idle pass replays

    return config.name or node_name()


def exit_code(outcomes: list[Outcome], awaiting_reboot: bool) -> int:
    """The contract's bit flags, OR-ed."""
    states = {o.state for o in outcomes}
    code = 0
    if any(o.changed for o in outcomes):
        code |= EXIT_CHANGED
    if states & {ResourceState.FAILED, ResourceState.BLOCKED}:
        code |= EXIT_FAILED
    if ResourceState.DRIFTED in states:
        code |= EXIT_DRIFTED
    if awaiting_reboot:
        code |= EXIT_REBOOT
    if ResourceState.SKIPPED in states:
        code |= EXIT_DEGRADED
    return code


def _names(outs: list[Outcome], what: str, limit: int = 3) -> str:
    shown = [f"{o.id} {what}" + (f": {o.reason}" if o.reason else "") for o in outs[:limit]]
    more = len(outs) - limit
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def reason_for(state: HostState, outcomes: list[Outcome], reboot_reason: str | None) -> str | None:
    """The host state's reason, naming the resources behind it."""
    def by(s: ResourceState) -> list[Outcome]:  # asked for the state behind the host's only
        return [o for o in outcomes if o.state is s]

    if state is HostState.FAILED:
        failed = _names(by(ResourceState.FAILED), "failed")
        blocked = by(ResourceState.BLOCKED)
        if blocked:
            ids = ", ".join(o.id for o in blocked[:3]) + (
                f" and {len(blocked) - 3} more" if len(blocked) > 3 else ""
            )
            failed += f"; blocked: {ids}"
        return failed
    if state is HostState.DRIFTED:
        return _names(by(ResourceState.DRIFTED), "drifted")
    if state is HostState.AWAITING_REBOOT:
        return reboot_reason
    if state is HostState.DEGRADED:
        return _names(by(ResourceState.SKIPPED), "skipped")
    return None


def _previous(store: StateStore | None, host: str) -> dict[str, Any] | None:
    """What a pass needs of the last one (its state, ``finishedAt``, ``reboot``); an unreadable
    report counts as none (the host state was ``unknown``)."""
    if store is None:
        return None
    try:
        return store.summary(host)
    except Unreadable:
        return None


def _chain(first: Progress | None, second: Progress) -> Progress:
    if first is None:
        return second

    def both(position: int, total: int, resource: str, state: ResourceState) -> None:
        first(position, total, resource, state)
        second(position, total, resource, state)

    return both


# Asked before a policy reboot by ``datum agent``: the group's reboot budget (a lease from the server).
Budget = Callable[[str], "Slot"]  # given the boot id the pass ran in


def _reboot_status(
    config: HostConfig,
    mode: Mode,
    outcomes: list[Outcome],
    root: Path,
    previous: dict[str, Any] | None,
    boot_id: str,
    budget: Budget | None = None,
    stopped: bool = False,
    known_stale: dict[str, int] | None = None,
) -> tuple[dict[str, Any] | None, bool, str | None, dict[str, int]]:
    """The report's ``reboot`` (None when none is needed), whether to reboot once it is persisted,
    the host reason when the reboot budget holds it back, and the markers found stale (kept for the
    next pass: ``known_stale`` is what the last pass kept).

    With ``budget``, a reboot the policy would make now is asked for first, after every resource
    ran: no slot (the group is full, the server cannot be asked) is no reboot, said so. A pass
    ``stopped`` part-way never reboots, asks for no slot and records no request: the next whole
    pass decides.
    """
    from datum.host import reboot as rb
    from datum.providers.facts import running_kernel

    changes = [
        f"{o.id} {o.action.past}, {o.reboot_required}"
        for o in outcomes
        if o.changed and o.reboot_required and o.state is ResourceState.CONVERGED
    ]
    running = running_kernel()
    found = rb.detect(root, running, changes)
    reasons, markers, need_boot = rb.still_needed(found, previous, boot_id, known_stale)
    stale = {m: t for m, t in found.markers.items() if m not in markers}
    if not reasons:
        return None, False, None, stale
    before = (previous or {}).get("reboot") or {}
    already = bool(before.get("requestedAt")) and before.get("bootId") == boot_id
    reasons, attempted = rb.not_booted(reasons, found.kernel, running, before, boot_id)
    if mode is Mode.OBSERVE:
        decision = rb.Decision(
            False, "none in observe mode; an enforce pass applies the reboot policy"
        )
    elif stopped:
        decision = rb.Decision(False, "none: the pass was stopped part-way; the next whole pass decides")
    elif attempted is not None and len(reasons) == 1 and not already:
        decision = rb.Decision(
            False,
            f"not rebooting again for kernel {found.kernel} (a reboot was requested at "
            f"{attempted['requestedAt']}); make it the default boot entry, or remove it",
        )
    else:
        now = datetime.now().astimezone()
        decision = rb.decide(config.reboot_policy, config.maintenance_window, now, already)
    held: str | None = None
    if decision.reboot_now and budget is not None:
        slot = budget(boot_id)
        if slot.granted:
            decision = rb.Decision(True, f"{decision.action}; {slot.words}")
        else:
            decision, held = rb.Decision(False, f"{slot.words}; asks again at the next pass"), slot.words
    reboot: dict[str, Any] = {
        "required": True,
        "reason": "; ".join(reasons),
        "policy": config.reboot_policy.value,
        "bootId": need_boot,
        "action": decision.action,
    }
    if markers:
        reboot["markers"] = markers
    if found.kernel:
        reboot["kernel"] = found.kernel
    if attempted is not None:
        reboot["attempted"] = attempted
    if already:
        reboot["requestedAt"] = before["requestedAt"]
    elif decision.reboot_now:
        reboot["requestedAt"] = datetime.now(UTC).isoformat()
    return reboot, decision.reboot_now, held, stale


def run(
    manifest: Manifest,
    *,
    root: str,
    mode: Mode,
    config: HostConfig,
    state_path: str | None,
    progress: Progress | None = None,
    persist: bool = True,
    extra: dict[str, Any] | None = None,
    budget: Budget | None = None,
    holding: Held | None = None,
) -> PassResult:
    """One pass over a validated manifest; persist the report unless ``persist`` is False (``datum plan``).

    ``extra`` adds fields to the report before it is persisted (``datum agent``: ``passId``,
    ``seq``, ``manifestDigest``, ...); a report with a ``seq`` is spooled with it, in one transaction.
    ``budget`` is asked before a policy reboot (``datum agent``: the group's reboot lease).
    ``holding``: the state file whose pass lock the caller already holds (``datum agent``, which
    unpacked the manifest under it; an idle pass that handed over, with its signal watch:
    ``datum.host.idle``), released by ``holding.close`` when the pass ends; else the
    lock is taken here.
    """
    from datum.providers.facts import read_boot_id
    from datum.signals import PASS_SIGNALS, stop_on

    try:
        root_path = real_root(root)
    except BaseException:
        if holding is not None:
            holding.close()  # nothing ran: the lock given back as if never taken (no record left)
        raise
    ctx = HostContext(
        root=root_path,
        mode=mode,
        manifest_dir=manifest.dir,
        boot_id_file=config.boot_id_file,
        managed_paths=manifest.paths,
    )
    host = host_name(config)
    boot_id = read_boot_id(config.boot_id_file)
    warnings: list[str] = []
    with ExitStack() as stack:
        if holding is not None:  # the caller's lock (and signal watch), released with the pass
            stack.push(holding.close)
            store: StateStore | None = holding.store
        else:
            store = StateStore(state_path) if persist and state_path else None
            if store is not None:
                stack.callback(store.close)
                stack.enter_context(store.lease(config.lock_wait, boot_id))
        if store is not None:
            progress = _chain(progress, _first_change(store.mark_changing))
        previous = _previous(store, host)
        if store is not None and unfinished(store.taken_over, previous):
            warnings.append(f"{unfinished_reason(store.taken_over or {})}; this pass replaces it")
        stopped = holding.stop if holding is not None and holding.stop is not None else (
            stack.enter_context(stop_on(*PASS_SIGNALS, once=True))
            if persist
            else None
        )
        started = datetime.now(UTC)
        clock = time.perf_counter()
        outcomes = run_pass(manifest, ctx, progress, stopped.is_set if stopped else None)
        pending = [o for o in outcomes if o.state is ResourceState.PENDING]
        incomplete = bool(stopped and stopped.signal and pending)
        known = store.stale_markers() if store is not None else {}
        reboot, reboot_now, held, stale = _reboot_status(
            config, mode, outcomes, root_path, previous, boot_id, budget, stopped=incomplete, known_stale=known
        )
        state = host_state([o.state for o in outcomes], awaiting_reboot=reboot is not None)
        code = exit_code(outcomes, reboot is not None)
        if incomplete:
            state, code, reboot_now = HostState.UNKNOWN, code | EXIT_FAILED, False
        reason = reason_for(state, outcomes, held or (reboot["reason"] if reboot else None))
        if incomplete:
            assert stopped is not None
            reason = _stopped_reason(stopped.signal, outcomes, pending)
        report = pass_report(
            host, mode.value, state.value, started.isoformat(), datetime.now(UTC).isoformat(),
            round(time.perf_counter() - clock, 6), manifest.source, code, outcomes,
            incomplete=incomplete, reason=reason, boot_id=boot_id, reboot=reboot, extra=extra,
        )
        if store:
            store.record(host, report, stale_markers=stale if stale != known else None)
    return PassResult(report, outcomes, code, reboot_now and persist, warnings)


def pass_report(
    host: str,
    mode: str,
    state: str,
    started: Any,
    finished: Any,
    duration: Any,
    manifest: str,
    code: int,
    outcomes: list[Outcome],
    *,
    incomplete: bool = False,
    reason: str | None = None,
    boot_id: str = "",
    reboot: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The pass report (the contract's ``PassReport``), its fields in the order they are stored
    (``datum.host.idle`` fills the same form with an idle pass's times)."""
    report: dict[str, Any] = {
        "host": host,
        "mode": mode,
        "state": state,
        "startedAt": started,
        "finishedAt": finished,
        "durationSeconds": duration,
        "manifest": manifest,
        "exitCode": code,
        "counts": dict(Counter(o.state.value for o in outcomes)),
        "resources": [o.as_report() for o in outcomes],
    }
    if incomplete:
        report["incomplete"] = True
    if reason:
        report["reason"] = reason
    if boot_id:
        report["bootId"] = boot_id
    if reboot:
        report["reboot"] = reboot
    report.update(extra or {})
    return report


def _stopped_reason(signal: str | None, outcomes: list[Outcome], pending: list[Outcome]) -> str:
    done = len(outcomes) - len(pending)
    why = f"the pass was stopped by {signal} after {done} of {len(outcomes)} resources; "
    why += f"{len(pending)} not reached (pending)"
    for state in (ResourceState.FAILED, ResourceState.BLOCKED):
        bad = [o for o in outcomes if o.state is state]
        why += f"; {_names(bad, state.value)}" if bad else ""
    return why


def _first_change(hook: Callable[[], None]) -> Progress:
    """A progress hook that calls ``hook`` once, before the first resource is applied."""
    done = [False]

    def first(_position: int, _total: int, _resource: str, state: ResourceState) -> None:
        if state is ResourceState.APPLYING and not done[0]:
            done[0] = True
            hook()

    return first


def reboot_and_record(command: str, state_path: str, report: dict[str, Any]) -> str | None:
    """Run the reboot command once the report is persisted; None when it started.

    A command that fails is recorded in the host's last report (``the reboot command failed: ...``,
    no ``requestedAt``, so the next pass tries again), and why is returned.
    """
    why = reboot_host(command)
    if why is None:
        return None
    reboot = dict(report.get("reboot") or {})
    reboot.pop("requestedAt", None)
    reboot["action"] = f"the reboot command failed: {why}"
    store = StateStore(state_path)
    try:
        store.record(report["host"], {**report, "reboot": reboot})
    finally:
        store.close()
    return why


def reboot_host(command: str) -> str | None:
    """Run the reboot command; None when it started, else why not."""
    from datum.host.reboot import reboot_argv
    from datum.providers.base import run as run_command

    done = run_command(reboot_argv(command), timeout=120)
    return None if done.returncode == 0 else done.why()

"""One host pass end to end: lock, engine, verdict, persist; ``datum apply``'s and ``datum plan``'s
engine pass; the reboot once the report is persisted.

The order is the contract's: nothing is touched before the whole manifest is valid; the report
is persisted before it is shown, posted, or any reboot. What the pass's outcomes mean (the host
state, its reason, the exit code, the report) is decided once, in ``datum.host.verdict``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datum.core.vocab import Mode, ResourceState
from datum.host import verdict
from datum.host.compiled import HostConfig, prepare
from datum.host.executor import Outcome, PassResult, Progress, run_pass
from datum.host.model import Manifest
from datum.host.statefile import Held, StateStore, Unreadable, unfinished, unfinished_reason
from datum.providers.base import HostContext

if TYPE_CHECKING:
    from datum.host.reboot import Slot
    from datum.signals import Stop


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


def state_file(state: str | None, config: HostConfig) -> str:
    """The host's local state file: ``--state``, else the configuration's (a URL is a usage error)."""
    from datum.host.statefile import state_path

    return state_path(state) if state else str(config.state_path)


def apply(
    manifest_path: str,
    *,
    root: str,
    mode: str | None,
    state: str | None,
    config: str | None,
    allow_outside: bool = False,
    progress: Progress | None = None,
    held: Held | None = None,
) -> PassResult:
    """``datum apply``'s pass when the idle pass could not answer (``datum.host.idle``): the
    manifest validated (or from its cache), the pass run and persisted, its idle entry kept.

    ``held``: the lock the idle pass handed over, released whatever happens; before the engine
    starts, as if no pass had run.
    """
    from datum.host import idle

    taken = idle.before(config)
    try:
        chosen, loaded, data = prepare(manifest_path, config, allow_outside)
        path = state_file(state, chosen)
    except BaseException:
        if held is not None:
            held.close()  # no pass ran: its record goes, as the engine alone never wrote one
        raise
    result = engine_pass(
        loaded, root=root, mode=Mode(mode) if mode else chosen.mode, config=chosen, state_path=path,
        progress=progress, holding=held,
    )
    idle.remember(manifest_path, root, mode, state, config, allow_outside, taken, data, chosen, loaded, result)
    return result


def plan(manifest_path: str, *, root: str, config: str | None, allow_outside: bool = False,
         progress: Progress | None = None) -> PassResult:
    """``datum plan``: an observe pass that persists nothing."""
    chosen, loaded, _data = prepare(manifest_path, config, allow_outside)
    return engine_pass(loaded, root=root, mode=Mode.OBSERVE, config=chosen, state_path=None, progress=progress,
                       persist=False)


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


def engine_pass(
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
    """One pass over a validated manifest: lock, engine, verdict, persist (unless ``persist`` is
    False: ``datum plan``).

    ``extra`` adds fields to the report before it is persisted (``datum agent``: ``passId``,
    ``seq``, ``manifestDigest``, ...); a report with a ``seq`` is spooled with it, in one transaction.
    ``budget`` is asked before a policy reboot (``datum agent``: the group's reboot lease).
    ``holding``: the state file whose pass lock the caller already holds (``datum agent``, which
    unpacked the manifest under it; an idle pass that handed over, with its signal watch:
    ``datum.host.idle``), released by ``holding.close`` when the pass ends; else the
    lock is taken here.
    """
    from datum.providers.facts import read_boot_id

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
    with ExitStack() as stack:
        store, stop = _hold(stack, holding, state_path if persist else None, config, boot_id, watch=persist)
        previous = _previous(store, host)
        warnings = []
        if store is not None:
            progress = _chain(progress, _first_change(store.mark_changing))
            if unfinished(store.taken_over, previous):
                warnings.append(f"{unfinished_reason(store.taken_over or {})}; this pass replaces it")
        started = datetime.now(UTC)
        clock = time.perf_counter()
        outcomes = run_pass(manifest, ctx, progress, stop.is_set if stop else None)
        stopped_by = stop.signal if stop else None
        known = store.stale_markers() if store is not None else {}
        reboot, reboot_now, held, stale = _reboot_status(
            config, mode, outcomes, root_path, previous, boot_id, budget,
            stopped=verdict.incomplete(outcomes, stopped_by), known_stale=known,
        )
        decided = verdict.decide(
            outcomes, reboot_reason=(held or reboot["reason"]) if reboot else None, stopped_by=stopped_by
        )
        report = verdict.report(
            decided, outcomes, host=host, mode=mode.value, started=started.isoformat(),
            finished=datetime.now(UTC).isoformat(), duration=round(time.perf_counter() - clock, 6),
            manifest=manifest.source, boot_id=boot_id, reboot=reboot, extra=extra,
        )
        if store is not None:
            store.record(host, report, stale_markers=stale if stale != known else None)
    return PassResult(report, outcomes, decided.exit_code, reboot_now and persist, warnings, config, state_path)


def _hold(
    stack: ExitStack, holding: Held | None, state_path: str | None, config: HostConfig, boot_id: str, watch: bool
) -> tuple[StateStore | None, Stop | None]:
    """The state file whose pass lock this pass holds (``holding``'s, or taken here; None for a
    pass that persists nothing) and the signal watch (``holding``'s, or taken here when ``watch``),
    each released when ``stack`` closes."""
    from datum.signals import PASS_SIGNALS, stop_on

    store: StateStore | None = None
    stop = None
    if holding is not None:  # the caller's lock (and signal watch), released with the pass
        stack.push(holding.close)
        store, stop = holding.store, holding.stop
    elif state_path is not None:
        store = StateStore(state_path)
        stack.callback(store.close)
        stack.enter_context(store.lease(config.lock_wait, boot_id))
    if stop is None and watch:
        stop = stack.enter_context(stop_on(*PASS_SIGNALS, once=True))
    return store, stop


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

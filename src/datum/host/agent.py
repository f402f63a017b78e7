"""Every engine pass, end to end: lock, engine, verdict, persist (``host_pass``); and where ``datum apply``
and ``datum plan`` get their manifest from.

``host_pass`` is the one orchestration of a host pass: ``datum apply`` (when the idle pass,
``datum.host.idle``, cannot answer), ``datum plan`` and ``datum agent`` (``datum.agent.loop``)
all call it. The order is the contract's: nothing is touched before the whole manifest is
valid; the report is persisted before it is shown, posted, or any reboot. What the pass's
outcomes mean (the host state, its reason, the exit code, the report) is decided once, in
``datum.host.verdict``; what it says of reboots, in ``datum.host.reboot``.
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datum.core.vocab import Mode
from datum.host import reboot, verdict
from datum.host.compiled import HostConfig, prepare
from datum.host.executor import PassResult, Progress, run_pass
from datum.host.lock import Held, Watch, hold, unfinished, unfinished_reason
from datum.host.model import Manifest
from datum.host.statefile import StateStore, Unreadable
from datum.providers import reads
from datum.providers.base import HostContext

if TYPE_CHECKING:
    from datum.host.hooks import AfterReboot

__all__ = ["PassResult", "apply", "host_name", "plan", "real_root", "host_pass", "state_file"]


def real_root(root: str) -> Path:
    """``--root`` resolved once (a symlinked root: every write under its target); a Problem
    when it is not a directory, raised before any lock is taken."""
    found = Path(os.path.realpath(root))
    if not found.is_dir():
        from datum.core.findings import ErrorCode, Problem

        raise Problem.one(ErrorCode.INVALID_INPUT, f"--root {root} is not a directory")
    return found


def host_name(config: HostConfig) -> str:
    return config.name or reads.node_name()  # a read the idle pass replays


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
        root_path = real_root(root)
    except BaseException:
        if held is not None:
            held.close()  # no pass ran: its record goes, as the engine alone never wrote one
        raise
    result = host_pass(
        loaded, root=root_path, mode=Mode(mode) if mode else chosen.mode, config=chosen, state_path=path,
        progress=progress, held=held,
    )
    idle.remember(manifest_path, root, mode, state, config, allow_outside, taken, data, chosen, loaded, result)
    return result


def plan(manifest_path: str, *, root: str, config: str | None, allow_outside: bool = False,
         progress: Progress | None = None) -> PassResult:
    """``datum plan``: an observe pass that persists nothing."""
    chosen, loaded, _data = prepare(manifest_path, config, allow_outside)
    return host_pass(
        loaded, root=real_root(root), mode=Mode.OBSERVE, config=chosen, state_path=None, progress=progress
    )


def host_pass(
    manifest: Manifest | None,
    *,
    root: Path,
    mode: Mode,
    config: HostConfig,
    state_path: str | None,
    held: Held | None = None,
    progress: Progress | None = None,
    extra: dict[str, Any] | None = None,
    budget: reboot.Budget | None = None,
    none_because: str = "",
    after_reboot: AfterReboot | None = None,
) -> PassResult:
    """One host pass: lock, engine, verdict, persist.

    ``root``: the real root (``real_root``, resolved before any lock was taken). ``state_path``
    None: ``datum plan``, which takes no lock and persists nothing. ``held``: the
    state file whose pass lock the caller holds (``datum agent``, which unpacked the manifest
    under it; an idle pass that handed over, with its signal watch), released when the pass ends;
    else the lock is taken here (``datum.host.lock``). A pass that runs resources watches the pass
    signals: SIGTERM or SIGINT stops it after the current resource. ``manifest`` None: there is
    none to apply (``datum agent``), and the report persisted says why (``none_because``,
    ``datum.host.verdict.no_pass``).
    ``extra`` adds fields to the report before it is persisted (``datum agent``: ``passId``,
    ``seq``, ``manifestDigest``, ...); a report with a ``seq`` is spooled with it, in one
    transaction. ``budget`` is asked before a policy reboot (``datum agent``: the group's lease).
    ``after_reboot`` (``datum agent``, ``datum.host.hooks``): after the resources ran, back from a reboot made
    under a lease, the health check and ``post_reboot``; their result is the report's ``health``.
    """
    with ExitStack() as stack:
        if held is not None:
            stack.push(held.close)  # the caller's lock (and signal watch), released with the pass
        host = host_name(config)
        boot_id = reads.boot_id(config.boot_id_file)
        if held is None and state_path is not None:
            held = hold(state_path, config.lock_wait.total_seconds(), boot_id, watch=False)
            stack.push(held.close)
        stop = held.watch if held is not None else None
        if stop is None and held is not None and manifest is not None:  # a pass that runs resources
            stop = Watch()
            stack.callback(stop.close)
        store = StateStore(held.path, held.db) if held is not None else None
        previous = _previous(store, host)
        warnings = []
        if held is not None and unfinished(held.lease.taken_over, previous):
            warnings.append(f"{unfinished_reason(held.lease.taken_over or {})}; this pass replaces it")
        started = datetime.now(UTC)
        clock = time.perf_counter()
        known: dict[str, int] = {}
        if manifest is None:
            outcomes, found, decided = [], reboot.Status(None, False, None, {}), verdict.no_pass(none_because)
        else:
            ctx = HostContext(
                root=root, mode=mode, manifest_dir=manifest.dir, boot_id_file=config.boot_id_file,
                managed_paths=manifest.paths,
            )
            changing = held.lease.mark_changing if held is not None else None  # its record made durable
            outcomes = run_pass(manifest, ctx, progress, stop.is_set if stop else None, changing)
            stopped_by = stop.signal if stop else None
            known = store.stale_markers() if store is not None else {}
            found = reboot.status(
                config, mode, outcomes, root, previous, boot_id, budget,
                stopped=verdict.incomplete(outcomes, stopped_by), known_stale=known,
            )
            checked = None
            if after_reboot is not None and store is not None:
                checked = after_reboot(store, boot_id, verdict.incomplete(outcomes, stopped_by))
                if checked is not None:
                    extra = {**(extra or {}), "health": checked}
            decided = verdict.decide(outcomes, reboot_reason=found.reason, stopped_by=stopped_by, health=checked)
        report = verdict.report(
            decided, outcomes, host=host, mode=mode.value, started=started.isoformat(),
            finished=datetime.now(UTC).isoformat(), duration=round(time.perf_counter() - clock, 6),
            manifest=manifest.source if manifest is not None else None, boot_id=boot_id, reboot=found.reboot,
            extra=extra,
        )
        if store is not None:
            store.record(host, report, stale_markers=found.stale if found.stale != known else None)
    reboot_now = found.reboot_now and state_path is not None
    signalled = stop.signal if stop is not None else None  # one that came after the last resource too
    stale = found.stale if store is not None else {}  # as the state file keeps them now (recorded, or known)
    return PassResult(report, outcomes, decided.exit_code, reboot_now, warnings, config, state_path, signalled, stale)


def _previous(store: StateStore | None, host: str) -> dict[str, Any] | None:
    """What a pass needs of the last one (its state, ``finishedAt``, ``reboot``); an unreadable
    report counts as none (the host state was ``unknown``)."""
    if store is None:
        return None
    try:
        return store.summary(host)
    except Unreadable:
        return None


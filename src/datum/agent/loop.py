"""One agent cycle (fetch, pass, persist and spool, deliver) and the loop that repeats it.

A cycle:

1. fetches this host's effective manifest (over HTTP, no lock held; the whole
   answer within ``deadline`` seconds and 16 MiB, ``datum.bounded``):
   an answer it cannot use is the reason the last good manifest is applied;
2. takes the state file's pass lock (as ``datum apply`` does: ``lock_wait``,
   then ``another pass is running``, exit 69) and, holding it, takes the next
   sequence number and a pass id (durable before anything runs: passes on one
   state file are numbered in the order they run), unpacks the
   manifest under ``<state>.manifest/<digest>/`` and removes the older ones
   (so no other pass's directory goes while it runs); when none was fetched,
   applies the last one (``manifestOrigin: "cached: <why>"``); with none,
   persists a report ``unknown`` saying why, and runs nothing; else runs a
   pass through the host pass engine (``datum.host.agent.host_pass``: SIGTERM after
   the current resource, incomplete reports), which
   persists the report and spools it in one transaction; a reboot the policy
   makes now is asked of the server first (the group's reboot budget,
   ``datum.agent.lease``): no lease, no reboot, and the report says why;
3. sends every spooled report, oldest first, until the server stops taking them
   (each within ``deadline``): what is not taken stays for the next cycle;
4. with a lease, runs the reboot command (a failure is recorded, and the lease
   given back).

It logs one line. The loop waits ``interval`` plus a random part of ``splay``
between cycles, and meanwhile holds a long poll on its manifest
(``datum.agent.push``): a change starts the next cycle within seconds (after a
random part of ``min(splay, 10 s)``), with the manifest the wait brought; a
server that does not hold waits, or a wait that fails, leaves the interval; SIGTERM or SIGINT while it waits ends it at once, during a
pass after the current resource (and after delivering the report). Before each
cycle, and at once on SIGHUP, it re-reads its configuration and token file
(``reload``): a rotated token or an edited ``datum.toml`` needs no restart, and
one that cannot be read keeps the last good one (the log says why). No answer
of the server ends the loop: a cycle that fails is logged and the next one runs.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from datum.agent.fetch import MAX_MANIFEST, Fetched, fetch, materialize
from datum.agent.post import Flushed, flush
from datum.agent.push import JITTER, Waiter
from datum.agent.state import AgentState
from datum.bounded import DEADLINE, Unusable
from datum.core import hostreasons
from datum.core.findings import Problem
from datum.core.vocab import Mode
from datum.host.compiled import HostConfig
from datum.host.lock import hold
from datum.providers import reads
from datum.trust import Trust


@dataclass(frozen=True)
class Options:
    server: str
    token: str
    root: str
    state_path: str
    config: HostConfig
    mode: Mode
    interval: timedelta
    splay: timedelta
    deadline: float = DEADLINE  # seconds for each of the server's answers, whole ([agent] answer_deadline)
    limit: int = MAX_MANIFEST  # bytes of a manifest's answer ([agent] max_answer_bytes)
    trust: Trust = Trust()  # what the server's certificate must be (--ca-file, --pin; datum.trust)
    session: Any = None  # the host's session from its key (datum.agent.identity.Session): ``token`` is unused then

    def bearer(self) -> str:
        """The token the next request carries: ``token``, or a session's (renewed when due); ``Unusable`` when
        the session cannot be had (said as for an unreachable server)."""
        return self.token if self.session is None else str(self.session.bearer())



@dataclass(frozen=True)
class Cycle:
    report: dict[str, Any]
    exit_code: int
    line: str
    stopped: bool  # a signal came during the pass: the loop ends


def facts(root: str, config: HostConfig) -> dict[str, Any]:
    """The facts the agent sends with its requests (and with an enrollment): what ``read_facts`` finds under ``root``."""
    from datum.providers.facts import read_facts

    read = read_facts(Path(os.path.realpath(root)), config.boot_id_file).as_dict()
    return {k: v for k, v in read.items() if k != "facts"}


def _manifest(state: AgentState, got: Any, last: tuple[str, bytes, str] | None, base: Path) -> tuple[Any, str | None, str]:
    """(the manifest to apply or None, its digest, where it came from or why there is none).

    ``got`` is what the fetch brought, ``last`` the manifest kept before it. Called with the pass
    lock held: unpacking removes the other manifests' directories under ``base``, which only a
    pass holding that lock reads.
    """
    why = _brief(got.why)
    if got.body is not None:
        try:
            manifest, digest = materialize(got.body, base)
        except Problem as problem:
            why = _brief(f"the served manifest does not validate here: {problem.findings[0].message}")
        else:
            state.keep_manifest(digest, got.body)
            return manifest, digest, "server"
    elif why is None and last is not None:  # 304: unchanged
        try:
            manifest, digest = materialize(last[1], base)
            return manifest, digest, "server"
        except Problem as problem:
            why = _brief(hostreasons.kept_invalid(problem.findings[0].message))
    if last is None:
        return None, None, hostreasons.no_manifest(why)
    try:
        manifest, digest = materialize(last[1], base)
    except Problem as problem:
        return None, None, f"{why}; and {hostreasons.kept_invalid(_brief(problem.findings[0].message))}"
    return manifest, digest, f"cached: {why}; applied the manifest fetched at {last[2]}"


def _brief(why: str | None, most: int = 300) -> str | None:
    """``why`` cut to ``most`` characters: it goes into ``manifestOrigin`` (500 at most), whatever the server sent."""
    return why if why is None or len(why) <= most else why[: most - 3] + "..."


def _budget(opts: Options, host: str) -> Any:
    """The pass engine's reboot budget: this host's lease, asked of the server with its facts; granted, the
    ``pre_reboot`` hook (drain) runs at once, and when it fails the lease is given back and the host stays up,
    the report saying why (``datum.core.budget.pre_reboot_failed``)."""

    def ask(boot_id: str) -> Any:
        from datum.agent.lease import give_back, take

        slot = take(
            opts.server, host, opts.token, boot_id, facts(opts.root, opts.config),
            interval=opts.interval.total_seconds(), trust=opts.trust,
        )
        config = opts.config
        if not slot.granted or not config.pre_reboot:
            return slot
        from datum.core.budget import pre_reboot_failed
        from datum.host.hooks import run_hook
        from datum.host.reboot import Slot

        why = run_hook("pre_reboot", config.pre_reboot, config.hook_timeout.total_seconds(), config.hooks_shell)
        if why is None:
            return Slot(True, f"{slot.words}; pre_reboot ran")
        back = give_back(opts.server, host, opts.token, boot_id, trust=opts.trust)
        return Slot(False, pre_reboot_failed(why, back))

    return ask


def _reboot(opts: Options, host: str, report: dict[str, Any]) -> str:
    """Run the reboot command under the lease the pass took; give the lease back when it fails. The log's words.
    Before it, the state file marks the boot it reboots from: the passes from the next boot check the host's
    health (``datum.host.hooks``) before the server frees the lease."""
    from datum.host.hooks import mark_reboot
    from datum.host.reboot import reboot_and_record

    command = opts.config.reboot_command
    boot_id = str(report.get("bootId") or "")
    mark_reboot(opts.config, opts.state_path, boot_id)
    why = reboot_and_record(command, opts.state_path, report)
    if why is None:
        return f"; rebooting: {command}"
    from datum.agent.lease import give_back
    from datum.host.hooks import CHECK_FROM
    from datum.host.statefile import StateStore

    store = StateStore(opts.state_path)
    try:
        store.set_meta(CHECK_FROM, None)  # no reboot: nothing to check from the next boot
    finally:
        store.close()
    back = give_back(opts.server, host, opts.token, boot_id, trust=opts.trust)
    return f"; the reboot command failed: {why}" + (f"; the reboot lease was not given back: {back}" if back else "")


def cycle(opts: Options, pushed: Any = None) -> Cycle:
    """Fetch (over HTTP, unlocked), then take the state file's pass lock and, holding it, number the
    pass, unpack the manifest and prune the older ones; the pass (``datum.host.agent.host_pass``: engine,
    verdict, persist and spool) releases it; deliver the spool, then the reboot.

    A lock held past ``lock_wait`` raises the ``UNAVAILABLE`` problem ``datum apply`` raises
    (``another pass is running ...``), before anything under ``<state>.manifest/`` is touched.
    """
    from datum.host import agent
    from datum.host.hooks import after_reboot

    path = opts.state_path
    host = agent.host_name(opts.config)
    state = AgentState(path)
    try:
        last = state.last_manifest()
        told = facts(opts.root, opts.config)  # for the manifest: its claims, which rules on facts match
        opts, unsigned = _signed_in(opts)
        got = pushed or (
            fetch(opts.server, host, opts.token, last[0] if last else None, told, opts.deadline, trust=opts.trust,
                  limit=opts.limit)
            if unsigned is None else Fetched(None, None, unsigned)
        )
        root = agent.real_root(opts.root)  # a root that is not a directory: said before the lock is taken
        held = hold(path, opts.config.lock_wait.total_seconds(), reads.boot_id(opts.config.boot_id_file), watch=False)
        try:
            seq = state.next_seq()  # under the lock: numbered in the order the passes run
            extra: dict[str, Any] = {
                "passId": str(uuid.uuid4()),
                "seq": seq,
                "intervalSeconds": opts.interval.total_seconds(),
            }
            manifest, digest, origin = _manifest(state, got, last, Path(f"{path}.manifest"))
        except BaseException as exc:
            held.close(type(exc), exc, exc.__traceback__)
            raise
        if manifest is not None:
            extra["manifestDigest"] = digest
            if origin == "server" and getattr(got, "revision", None):  # the revision of what the server gave now
                extra["revision"] = got.revision
        extra["manifestOrigin"] = origin
        result = agent.host_pass(
            manifest, root=root, mode=opts.mode, config=opts.config, state_path=path, held=held,
            extra=extra, budget=_budget(opts, host), none_because=origin,
            after_reboot=after_reboot(opts.config),
        )
        sent = (
            flush(state, opts.server, host, opts.token, opts.deadline, told, opts.trust)
            if unsigned is None else Flushed(0, state.trim(), len(state.pending()), unsigned)
        )
    finally:
        state.close()
    report, code = result.report, result.exit_code
    rebooting = _reboot(opts, host, report) if result.reboot_now else ""
    line = (
        f"datum agent: pass {seq} ({report.get('passId', '')[:8]}) host {host} state {report['state']}, "
        f"exit {code}, manifest {digest or 'none'} ({origin.split(';')[0] if manifest is not None else 'none'})"
        f"; delivered {sent.delivered}"
        + (f", {sent.left} kept for later: {sent.why}" if sent.left else "")
        + (f", {sent.dropped} dropped" if sent.dropped else "")
        + (f"; reason: {report['reason']}" if report.get("reason") and report["state"] != "converged" else "")
        + rebooting
    )
    return Cycle(report, code, line, stopped=result.signal is not None)


def run_forever(opts: Options, log: Any = None, reload: Callable[[], Options] | None = None) -> int:
    """Cycles every ``interval`` (plus up to ``splay``) until SIGTERM or SIGINT; 0 on a clean stop.

    ``reload`` makes the options again from the configuration and token files: called before each
    cycle and on SIGHUP; when it fails, the options it last made are kept.
    """
    import signal

    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    stop, hup, wake = threading.Event(), threading.Event(), threading.Event()

    def handler(signum: int, _frame: Any) -> None:
        (hup if signum == signal.SIGHUP else stop).set()
        wake.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, handler)
    pushed = None
    while not stop.is_set():
        opts = _reloaded(opts, reload, log)
        try:
            done = cycle(opts, pushed)
            log(done.line)
            if done.stopped:
                return 0
        except Problem as problem:  # one bad cycle (a lock held, a full disk) is logged; the loop goes on
            log(f"datum agent: the pass did not run: {problem.findings[0].message}")
        except Exception as exc:  # noqa: BLE001 - never stopped by what a cycle met; said, and the next runs
            log(f"datum agent: the cycle failed: {type(exc).__name__}: {str(exc)[:500]}")
        pushed = None
        until = time.monotonic() + opts.interval.total_seconds() + random.uniform(0, opts.splay.total_seconds())
        waiter = _waiter(opts, until, wake)
        while not stop.is_set() and (left := until - time.monotonic()) > 0:
            wake.wait(left)
            wake.clear()
            if hup.is_set() and not stop.is_set():
                hup.clear()
                opts = _reloaded(opts, reload, log, asked=True)
            if waiter is not None and pushed is None and waiter.changed is not None:
                pushed = waiter.changed  # the next pass, within seconds, not all of a fleet in one second
                jitter = random.uniform(0, min(opts.splay.total_seconds(), JITTER))
                until = min(until, time.monotonic() + jitter)
        if waiter is not None:
            waiter.stop()
            if waiter.why is not None and pushed is None:
                log(f"datum agent: not waiting for changes: {waiter.why}; this pass runs on the interval")
    return 0


def _waiter(opts: Options, until: float, wake: threading.Event) -> Waiter | None:
    """A long poll on this host's manifest until ``until``, from the digest of the manifest it has
    (none fetched yet: nothing to wait on, the interval)."""
    from datum.host import agent

    try:
        state = AgentState(opts.state_path)
        try:
            last = state.last_manifest()
        finally:
            state.close()
        host = agent.host_name(opts.config)
        told = facts(opts.root, opts.config)
    except Exception:  # noqa: BLE001 - what the next pass says too; meanwhile, the interval
        return None
    if last is None:
        return None

    def ask(seconds: int) -> Any:
        signed, unsigned = _signed_in(opts)  # each wait with a live session: a wait may outlast one
        if unsigned is not None:
            return Fetched(None, None, unsigned)
        return fetch(signed.server, host, signed.token, last[0], told, signed.deadline, wait=seconds, trust=signed.trust,
                     limit=signed.limit)

    return Waiter(ask, last[0], until, wake).start()


def _signed_in(opts: Options) -> tuple[Options, str | None]:
    """``opts`` with the token its requests carry now (a session's, renewed when due), and None; or ``opts`` and
    why no session could be had (the server unreachable, or refusing the host's key)."""
    if opts.session is None:
        return opts, None
    try:
        return replace(opts, token=opts.bearer()), None
    except Unusable as exc:
        return opts, f"no session from the host key: {exc}"


def _reloaded(opts: Options, reload: Callable[[], Options] | None, log: Any, asked: bool = False) -> Options:
    """``reload()``'s options, logging what changed (never the token); ``opts`` when it fails."""
    if reload is None:
        return opts
    try:
        new = reload()
    except Exception as exc:  # noqa: BLE001 - a bad edit must not stop the agent: the last good one runs
        message = exc.findings[0].message if isinstance(exc, Problem) else f"{type(exc).__name__}: {exc}"
        log(f"datum agent: the configuration was not re-read, the last good one is kept: {message[:500]}")
        return opts
    changed = [f.name for f in fields(Options) if getattr(new, f.name) != getattr(opts, f.name)]
    if changed or asked:
        log(f"datum agent: configuration re-read ({', '.join(changed) + ' changed' if changed else 'unchanged'})")
    return new

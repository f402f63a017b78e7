"""Reboots: what says one is needed, whether an earlier need still holds, what the policy makes of
it (``status``: the report's ``reboot``), and the reboot itself once the report is persisted.

A need comes from a change a provider made (a kernel package), from Debian's
``/run/reboot-required`` marker under the root, or from a newer kernel under
``/boot`` than the running one. It holds until the boot id changes; a marker
seen before that reboot is stale after it (on a real host ``/run`` is a tmpfs
and the marker is gone; in a root it is not).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datum.core import hostreasons
from datum.core.vocab import Mode, RebootPolicy, ResourceState
from datum.providers import fs, reads
from datum.providers.base import ProviderError

if TYPE_CHECKING:
    from datum.host.compiled import HostConfig
    from datum.host.executor import Outcome

MARKERS = hostreasons.MARKERS


@dataclass(frozen=True, slots=True)
class Found:
    """What this pass found: reasons, and the markers by path with their mtime."""

    reasons: tuple[str, ...]
    markers: dict[str, int]
    kernel: str | None = None  # the newer kernel in /boot, when there is one


def _version_key(version: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.findall(r"\d+|[a-z]+", version.lower()))


def newer_kernel(root: Path, running: str) -> str | None:
    """The newest kernel under /boot when it is newer than ``running``.

    A /boot that cannot be read (or links out of the root) has none.
    """
    try:
        boot = reads.real_path(str(root), "/boot")
        versions = [n.removeprefix("vmlinuz-") for n in reads.listdir(boot) if n.startswith("vmlinuz-")]
    except (OSError, ProviderError):
        return None
    if not versions:
        return None
    newest = max(versions, key=_version_key)
    return newest if _version_key(newest) > _version_key(running) else None


def detect(root: Path, running_kernel: str, changes: list[str]) -> Found:
    """Every reason a reboot is needed now: ``changes`` from this pass, markers, a newer kernel.

    Reading a marker never fails the pass nor blocks: one that cannot be read
    (a link out of the root, a FIFO or a device for its ``.pkgs`` list, no
    permission) is a reason that says so, remembered like a readable one so a
    reboot does not bring it back as a new need.
    """
    reasons = list(changes)
    markers: dict[str, int] = {}
    seen: set[str] = set()
    for marker in MARKERS:
        seen_as, mtime, reason = _marker(root, marker)
        if reason is None or seen_as in seen:
            continue
        seen.add(seen_as)
        markers[marker] = mtime
        reasons.append(reason)
    kernel = newer_kernel(root, running_kernel)
    if kernel:
        reasons.append(kernel_reason(kernel, running_kernel))
    return Found(tuple(reasons), markers, kernel)


def _marker(root: Path, marker: str) -> tuple[str, int, str | None]:
    """(where it is, its mtime, the reason it gives) for one marker; no reason when it is absent.
    Read as the engine reads every path (``datum.providers.reads``: resolved inside the root,
    recorded); the ``.pkgs`` list as a provider reads a file (``datum.providers.fs``: refused
    unless it is a regular file)."""
    try:
        real = reads.real_path(str(root), marker)
        st = reads.lstat(real)
    except (FileNotFoundError, NotADirectoryError):
        return marker, 0, None  # absent (a parent that is a file included)
    except (OSError, ProviderError) as exc:
        where, mtime = _link_itself(root, marker)
        return where, mtime, hostreasons.present(marker, f"but could not be read ({_why(exc, root)})")
    try:
        pkgs = fs.read_bytes(reads.real_path(str(root), f"{marker}.pkgs")) or b""
    except (OSError, ProviderError) as exc:
        return (
            real,
            st.st_mtime_ns,
            hostreasons.present(marker, f"({marker}.pkgs could not be read: {_why(exc, root)})"),
        )
    names = sorted(set(pkgs.decode("utf-8", "replace").split()))
    return real, st.st_mtime_ns, hostreasons.present(marker, f"({', '.join(names)})" if names else "")


def _link_itself(root: Path, marker: str) -> tuple[str, int]:
    """The marker's own path and mtime, its last link not followed; (the marker, 0) when even that fails."""
    try:
        real = reads.real_path(str(root), marker, follow_last=False)
        st = fs.lstat(real)
    except (OSError, ProviderError):
        return marker, 0
    return real, st.st_mtime_ns if st is not None else 0


def _why(exc: BaseException, root: Path) -> str:
    """The error as one line, paths under the root shown as host paths (as the pass lines show them)."""
    if isinstance(exc, OSError) and exc.strerror:
        text = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    else:
        text = str(exc)
    top = os.path.abspath(root)
    return text if top == "/" else text.replace(top + "/", "/")


def kernel_reason(kernel: str, running: str) -> str:
    return hostreasons.kernel(kernel, running)


def not_booted(
    reasons: list[str], kernel: str | None, running: str, before: dict[str, Any], boot_id: str
) -> tuple[list[str], dict[str, str] | None]:
    """Whether a reboot for ``kernel`` was already made and came back to ``running``.

    ``before`` is the last pass's ``reboot``. A reboot requested in another boot
    for this same kernel, which is still not the one running, did not bring it
    up: the machine boots something else by default (a pinned entry, a
    fallback). Then the kernel's reason says so and that attempt is returned,
    so no policy reboots for it again (no reboot loop); other reasons stand.
    """
    if kernel is None:
        return reasons, None
    attempted = before.get("attempted")
    if not (isinstance(attempted, dict) and attempted.get("kernel") == kernel):
        attempted = None
        requested, found_in = before.get("requestedAt"), before.get("bootId")
        if requested and before.get("kernel") == kernel and found_in != boot_id:
            attempted = {"kernel": kernel, "requestedAt": str(requested), "bootId": str(found_in)}
    if attempted is None:
        return reasons, None
    said = hostreasons.not_default(running, kernel)
    others = [r for r in reasons if r not in (kernel_reason(kernel, running), said)]
    return [*others, said], attempted


def still_needed(
    found: Found, previous: dict[str, Any] | None, boot_id: str, known_stale: dict[str, int] | None = None
) -> tuple[list[str], dict[str, int], str]:
    """Combine this pass's finds with the last pass's need: (reasons, markers, boot id of the need).

    ``known_stale``: markers an earlier pass found stale (by their mtime), which stay stale until
    they change: a root keeps its ``/run`` across a reboot, and a marker forgiven once must not
    bring the need back on the pass after (an ``automatic`` policy would reboot every other pass).
    """
    prev = (previous or {}).get("reboot") or {}
    same_boot = bool(prev.get("required")) and prev.get("bootId") == boot_id
    if same_boot:
        reasons = [r for r in str(prev.get("reason") or "").split("; ") if r]
        markers = {**found.markers}
        for r in found.reasons:
            if r not in reasons:
                reasons.append(r)
        return reasons, markers, boot_id
    # A reboot happened since (or there was no need): a marker it already saw is stale.
    stale = {**(known_stale or {}), **(prev.get("markers") or {})}
    reasons = [
        r
        for r in found.reasons
        if not any(
            r.startswith(f"{m} present") and stale.get(m) == found.markers.get(m)
            for m in found.markers
        )
    ]
    markers = {m: t for m, t in found.markers.items() if stale.get(m) != t}
    return reasons, markers, boot_id


def in_window(window: str, now: datetime) -> bool:
    """Whether ``now`` (local time) falls in a window such as ``Sun 02:00-04:00``."""
    from datum.config import (
        parse_window,  # pydantic comes with it: only when a window is asked about
    )

    days, start, end = parse_window(window)
    minute = now.hour * 60 + now.minute
    today = now.weekday()
    if start < end:
        return today in days and start <= minute < end
    return (today in days and minute >= start) or ((today - 1) % 7 in days and minute < end)


@dataclass(frozen=True, slots=True)
class Decision:
    reboot_now: bool
    action: str


def decide(
    policy: RebootPolicy, window: str | None, now: datetime, already_requested: bool
) -> Decision:
    """What the agent does about a needed reboot, after the report is persisted."""
    if already_requested:
        return Decision(False, "reboot already requested in this boot; waiting for it")
    if policy is RebootPolicy.NEVER:
        return Decision(False, "waiting for a human (reboot_policy never)")
    if policy is RebootPolicy.MANUAL:
        return Decision(False, "run 'datum reboot' to reboot (reboot_policy manual)")
    if policy is RebootPolicy.MAINTENANCE:
        assert window is not None
        if in_window(window, now):
            return Decision(True, f"rebooting in the maintenance window {window}")
        return Decision(False, f"reboot in the next maintenance window {window}")
    return Decision(True, "rebooting now (reboot_policy automatic)")


@dataclass(frozen=True, slots=True)
class Slot:
    """The group's reboot budget's answer: a slot to reboot in, or why not (the host's reason then)."""

    granted: bool
    words: str


def reboot_argv(command: str) -> list[str]:
    import shlex

    return shlex.split(command)


# Asked before a policy reboot by ``datum agent``: the group's reboot budget (a lease from the server).
Budget = Callable[[str], Slot]  # given the boot id the pass ran in


@dataclass(frozen=True, slots=True)
class Status:
    """What a pass says of reboots: the report's ``reboot`` (None when none is needed), whether to
    reboot once the report is persisted, the host reason when the reboot budget holds it back, and
    the markers found stale (kept for the next pass)."""

    reboot: dict[str, Any] | None
    reboot_now: bool
    held: str | None
    stale: dict[str, int]

    @property
    def reason(self) -> str | None:
        """Why the host awaits a reboot (the verdict's ``reboot_reason``); None when it does not."""
        return (self.held or self.reboot["reason"]) if self.reboot else None


def status(
    config: HostConfig,
    mode: Mode,
    outcomes: Sequence[Outcome],
    root: Path,
    previous: dict[str, Any] | None,
    boot_id: str,
    budget: Budget | None = None,
    stopped: bool = False,
    known_stale: dict[str, int] | None = None,
) -> Status:
    """The reboot status of a pass over ``outcomes`` (``known_stale``: the markers the last pass kept).

    With ``budget``, a reboot the policy would make now is asked for first, after every resource
    ran: no slot (the group is full, the server cannot be asked) is no reboot, said so. A pass
    ``stopped`` part-way never reboots, asks for no slot and records no request: the next whole
    pass decides.
    """
    changes = [
        hostreasons.changed(o.id, o.action.past, o.reboot_required)
        for o in outcomes
        if o.changed and o.reboot_required and o.state is ResourceState.CONVERGED
    ]
    running = reads.kernel()
    found = detect(root, running, changes)
    reasons, markers, need_boot = still_needed(found, previous, boot_id, known_stale)
    stale = {m: t for m, t in found.markers.items() if m not in markers}
    if not reasons:
        return Status(None, False, None, stale)
    before = (previous or {}).get("reboot") or {}
    already = bool(before.get("requestedAt")) and before.get("bootId") == boot_id
    reasons, attempted = not_booted(reasons, found.kernel, running, before, boot_id)
    if mode is Mode.OBSERVE:
        decision = Decision(False, "none in observe mode; an enforce pass applies the reboot policy")
    elif stopped:
        decision = Decision(False, "none: the pass was stopped part-way; the next whole pass decides")
    elif attempted is not None and len(reasons) == 1 and not already:
        decision = Decision(
            False,
            f"not rebooting again for kernel {found.kernel} (a reboot was requested at "
            f"{attempted['requestedAt']}); make it the default boot entry, or remove it",
        )
    else:
        decision = decide(config.reboot_policy, config.maintenance_window, datetime.now().astimezone(), already)
    held: str | None = None
    if decision.reboot_now and budget is not None:
        slot = budget(boot_id)
        if slot.granted:
            decision = Decision(True, f"{decision.action}; {slot.words}")
        else:
            decision, held = Decision(False, f"{slot.words}; asks again at the next pass"), slot.words
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
    return Status(reboot, decision.reboot_now, held, stale)


def reboot_and_record(command: str, state_path: str, report: dict[str, Any]) -> str | None:
    """Run the reboot command once the report is persisted; None when it started.

    A command that fails is recorded in the host's last report (``the reboot command failed: ...``,
    no ``requestedAt``, so the next pass tries again), and why is returned.
    """
    why = reboot_host(command)
    if why is None:
        return None
    from datum.host.statefile import StateStore

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
    from datum.providers.base import run as run_command

    done = run_command(reboot_argv(command), timeout=120)
    return None if done.returncode == 0 else done.why()

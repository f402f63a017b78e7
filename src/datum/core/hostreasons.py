"""The words of a host's reason, written once for the modules that say them and for ``datum explain``, which
reads them back (``datum.core.phrases``).

A host's reason is made far from the core: the verdict (``datum.host.verdict``), the state file and its lock
(``datum.host.statefile``, ``datum.host.lock``), the reboot detection (``datum.host.reboot``), the stale rule
(``datum.fleet.stale``), the agent without a manifest (``datum.agent.loop``), the API's host rows
(``datum.api.models``), ``datum status`` before any pass, the fleet directory's check
(``datum.fleet.effective``). Each makes its words here, and the reader matches the same constants, so a
rewording is one edit that both follow (as ``datum.core.budget`` does for the reboot budget's words).
Pure: strings in, strings out.
"""

from __future__ import annotations

# The agent fell silent (``datum.fleet.stale``): unknown.
STALE = "stale: the last report is"
# The pass did not reach every resource, or never ran: unknown.
STOPPED = "the pass was stopped by"
UNFINISHED, UNFINISHED_END = "the pass started at", "did not finish"
NO_PASS = "no pass has completed"
NO_MANIFEST = "no manifest has ever been fetched"
KEPT_INVALID = "the kept manifest does not validate"
# Its report (or the state stored for it) cannot be read: unknown.
UNREADABLE = "cannot be read"
NOT_A_STATE = "is not a host state"
# A failed host's reason: the failed resources, then those blocked behind them.
BLOCKED = "; blocked: "
# Why a host awaits a reboot (``datum.host.reboot``): Debian's marker, a newer kernel, a change that needs one.
MARKERS = ("/run/reboot-required", "/var/run/reboot-required")
PRESENT = "present"
KERNEL_IN_BOOT = "in /boot, running"
NOT_DEFAULT = "is not the default boot entry"
RUNNING_KERNEL_DIFFERS = "running kernel differs"  # why a kernel package's change needs a reboot
# The server's fleet directory ([fleet] manifests), when it cannot serve from it.
FLEET_DIRECTORY = "the fleet directory"
NOT_THERE, NOT_A_DIRECTORY, NOT_READABLE = "is not there", "is not a directory", "cannot be read by the server"
FLEET_SETTING = "([fleet] manifests)"
# Why a resource refused to act as root (``datum.providers``): words a failed resource's reason carries.
LINK_RULE = "(the link rule)"
CHANGED_SINCE = "changed since it was observed"
APPEARED_SINCE = "appeared since it was observed"
HARD_LINKS = "hard links and fs.protected_hardlinks is off"
ACCOUNTS_LOCKED = "to lock the account databases; nothing was written"


def stale(age: str, multiple: float, interval: str, said: object) -> str:
    """The last report, ``age`` old, is overdue: more than ``multiple`` x the agent's ``interval``."""
    return f"{STALE} {age} old, more than {multiple:g} x its {interval} interval (it said {said})"


def stopped(signal: str, done: int, total: int) -> str:
    """A pass a signal stopped part-way: how far it came (what failed is added after)."""
    return f"{STOPPED} {signal} after {done} of {total} resources; {total - done} not reached (pending)"


def unfinished(started: object, pid: object) -> str:
    """A pass whose lock record stays: it started and never wrote its report."""
    return f"{UNFINISHED} {started} {UNFINISHED_END} (pid {pid})"


def no_manifest(why: str) -> str:
    """The agent has nothing to apply: the server never answered with a manifest."""
    return f"{NO_MANIFEST}: {why}"


def kept_invalid(why: str) -> str:
    """The manifest the agent kept from the server no longer validates."""
    return f"{KEPT_INVALID}: {why}"


def unreadable(what: str, why: object) -> str:
    """``what`` (the last pass report of a host, its summary) cannot be read, and why."""
    return f"{what} {UNREADABLE}: {why}"


def not_a_state(stored: object) -> str:
    """The state stored for a host is no host state (a hand edit, another writer)."""
    return f"the stored host state {str(stored)[:40]!r} {NOT_A_STATE}"


def present(marker: str, detail: str = "") -> str:
    """A reboot marker is there (``detail``: the packages it names, or why they could not be read)."""
    return f"{marker} {PRESENT}" + (f" {detail}" if detail else "")


def kernel(newer: str, running: str) -> str:
    """A newer kernel is installed than the one running."""
    return f"kernel {newer} {KERNEL_IN_BOOT} {running}"


def not_default(running: str, newer: str) -> str:
    """A reboot for the newer kernel came back to the older one: it is not what the machine boots."""
    return f"rebooted into {running}, newer kernel {newer} {NOT_DEFAULT}"


def changed(resource_id: str, past: str, why: str) -> str:
    """A change made by a pass that needs a reboot: ``Package[linux-image] updated, running kernel differs``."""
    return f"{resource_id} {past}, {why}"


def fleet_directory(where: object, problem: str) -> str:
    """Why the server cannot serve from its fleet directory (``problem``: ``NOT_THERE`` ...)."""
    return f"{FLEET_DIRECTORY} {where} {problem} {FLEET_SETTING}"

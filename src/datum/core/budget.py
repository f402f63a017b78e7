"""The fleet's reboot budget in words and arithmetic: at most N hosts of a group rebooting at once.

Pure: the server's lease store counts the hosts rebooting, the agent says why
it waits, ``datum explain`` explains both; all three take their words here.
"""

from __future__ import annotations

DEFAULT_GROUP = "default"  # the group of a host no nodes.yaml rule gives one

WAITING = "waiting for the group's reboot budget"
NO_LEASE = "not rebooting: no reboot lease from the server"
HALTED = "the group's reboots are halted"


def waiting(rebooting: int, limit: int) -> str:
    """The host reason of a host whose group has no slot left: ``... (2/2 rebooting)``."""
    return f"{WAITING} ({rebooting}/{limit} rebooting)"


def halted(hosts: list[str]) -> str:
    """The host reason while a host of its group took a lease and has not come back within ``reboot_timeout``:
    no other host of the group reboots until it reports from a new boot, or an operator clears its lease."""
    named = ", ".join(hosts[:3]) + (f" and {len(hosts) - 3} more" if len(hosts) > 3 else "")
    verb = "has" if len(hosts) == 1 else "have"
    return f"{HALTED}: {named} {verb} not come back from a reboot within [fleet] reboot_timeout"


def no_lease(why: str) -> str:
    """The host reason when the server could not be asked (or refused to answer): no reboot without a lease."""
    return f"{NO_LEASE} ({why})"


def room(rebooting: int, limit: int) -> bool:
    """Whether one more host of the group may start rebooting."""
    return rebooting < limit

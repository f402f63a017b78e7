"""The fleet's reboot budget in words and arithmetic: at most N hosts of a group rebooting at once, in the
group's ``reboot_order``, each freeing its slot only once it is back converged and healthy.

Pure: the server's lease store counts the hosts rebooting and queues those waiting, the agent says why
it waits, ``datum explain`` explains every reason; all of them take their words and decisions here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT_GROUP = "default"  # the group of a host no nodes.yaml rule gives one

WAITING = "waiting for the group's reboot budget"
NO_LEASE = "not rebooting: no reboot lease from the server"
HALTED = "the group's reboots are halted"
TURN = "waiting for its turn to reboot"
BLOCKED = "reboots are blocked"
BY_NAME = "name"  # nodes.yaml reboot_order: a group's hosts by name (natural order: web2 before web10)

# A group's reboot order: BY_NAME, or an explicit list of host names (those it does not name go after, by name).
Order = str | tuple[str, ...]


def waiting(rebooting: int, limit: int) -> str:
    """The host reason of a host whose group has no slot left: ``... (2/2 rebooting)``."""
    return f"{WAITING} ({rebooting}/{limit} rebooting)"


def _named(hosts: list[str]) -> str:
    return ", ".join(hosts[:3]) + (f" and {len(hosts) - 3} more" if len(hosts) > 3 else "")


def halted(hosts: list[str], unhealthy: Mapping[str, str | None] | None = None) -> str:
    """The host reason while a host of its group took a lease and has not come back within ``reboot_timeout``:
    no other host of the group reboots until it reports from a new boot, converged and healthy, or an operator
    clears its lease. ``unhealthy``: why a host that did report from a new boot did not free its lease
    (``back_unhealthy``), so the words say it came back unhealthy rather than not at all."""
    why = {h: w for h, w in (unhealthy or {}).items() if w and h in hosts}
    if why and len(why) == len(hosts):
        first = hosts[0]
        verb = "has" if len(hosts) == 1 else "have"
        return (f"{HALTED}: {_named(hosts)} {verb} not come back healthy from a reboot within [fleet] "
                f"reboot_timeout ({first} {why[first]})")
    verb = "has" if len(hosts) == 1 else "have"
    return f"{HALTED}: {_named(hosts)} {verb} not come back from a reboot within [fleet] reboot_timeout"


def turn(ahead: list[str]) -> str:
    """The host reason while hosts before it in its group's ``reboot_order`` wait for the slot it would take."""
    return f"{TURN} (reboot_order): {_named(ahead)} first"


def blocked(why: str) -> str:
    """The host reason while ``[fleet] reboot_block_query`` holds every group's reboots (``why``: what it
    returned, or why Prometheus could not be asked)."""
    return f"{BLOCKED}: {why}"


def back_unhealthy(report: Mapping[str, Any]) -> str | None:
    """None when a pass report from a new boot frees its host's reboot lease: the host is converged and, when
    its agent ran them (the report's ``health``), its health check and ``post_reboot`` hook passed. Otherwise
    why not, kept on the lease (``came back unhealthy: ...``): the lease holds, and past ``reboot_timeout``
    it halts the group as any host that did not come back does. One rule for every store and surface."""
    state = str(report.get("state"))
    sick = unhealthy(report.get("health"))
    if state != "converged" and not (state == "degraded" and sick):  # degraded by the check: said as unhealthy
        reason = report.get("reason")
        return (f"{CAME_BACK} {state}" + (f": {reason}" if reason else ""))[:1000]
    return sick


CAME_BACK = "came back"  # from a reboot under a lease, not converged and healthy: ``came back failed: ...``
UNHEALTHY = f"{CAME_BACK} unhealthy"


def unhealthy(health: Any) -> str | None:
    """Why a host back from a reboot under a lease is not healthy (a report's ``health``: its health check,
    ``health_url`` or ``post_reboot`` failed), in the words of the host's reason and its lease (``came back
    unhealthy: health_check (test) exited 1``); None when it is healthy or was not checked. The host reads
    ``degraded`` for it (``datum.core.rollup.host_state``) from the first check that fails until one passes."""
    if not isinstance(health, Mapping) or health.get("ok") is True:
        return None
    return f"{UNHEALTHY}: {health.get('detail') or 'its health check did not pass'}"[:1000]


def _natural(name: str) -> tuple[Any, ...]:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.findall(r"\d+|\D+", name))


def in_order(order: Order, hosts: Iterable[str]) -> list[str]:
    """``hosts`` in a group's reboot order: by name (naturally: web2 before web10), or the explicit list's order
    with the hosts it does not name after it, by name."""
    if order == BY_NAME or isinstance(order, str):
        return sorted(hosts, key=_natural)
    rank = {h: i for i, h in enumerate(order)}
    return sorted(hosts, key=lambda h: (rank.get(h, len(rank)), _natural(h)))


PRE_REBOOT_FAILED = "not rebooting: the pre_reboot hook failed"


def pre_reboot_failed(why: str, not_given_back: str | None = None) -> str:
    """The host reason when ``pre_reboot`` (drain) failed after the lease was granted: no reboot, the lease given
    back (or why it could not be: then it frees itself at ``reboot_timeout``)."""
    back = f"; the reboot lease was not given back: {not_given_back}" if not_given_back else "; the reboot lease was given back"
    return f"{PRE_REBOOT_FAILED} ({why}){back}"


def no_lease(why: str) -> str:
    """The host reason when the server could not be asked (or refused to answer): no reboot without a lease."""
    return f"{NO_LEASE} ({why})"


def room(rebooting: int, limit: int) -> bool:
    """Whether one more host of the group may start rebooting."""
    return rebooting < limit

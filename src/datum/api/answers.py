"""What the fleet's routes answer and the fleet commands print through the store: one function per answer.

A fleet command (``datum hosts``, ``datum reboots list``, ...) reads the store itself, or asks a server's
API with ``--server`` (``datum.cli.remote``); either way it renders the same model (``datum.api.models``),
built here from the store for the route and for the store path alike, so the output is the same by
construction. One function per list, so a rule about what a list holds (a filter, a lease beside each
host) is added once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from datum.api.models import (
    HostList,
    HostSummary,
    RebootGroup,
    RebootLease,
    Reboots,
    host_list,
)
from datum.config import FleetSettings
from datum.core.attention import REBOOT_OVERDUE, Need, decide, host_need, ordered
from datum.core.order import HOST_ORDER
from datum.fleet.listing import DEFAULT_LIMIT, page, worst_first
from datum.store import Store
from datum.store.leases import Lease, Leases, cleared
from datum.store.leases import read as read_leases

S = TypeVar("S", bound=HostSummary)


def lease_model(lease: Lease) -> RebootLease:
    return RebootLease.model_validate(lease.as_json())


def with_lease(status: S, leases: Leases) -> S:
    """``status`` with the reboot lease its host holds, when it holds one (the host listing and detail)."""
    mine = leases.of(status.host)
    return status if mine is None else status.model_copy(update={"rebooting": lease_model(mine)})


def host_listing(
    store: Store, fleet: FleetSettings, now: datetime, *, state: str | None = None, after: str | None = None,
    limit: int = DEFAULT_LIMIT, worst: bool = False, groups: frozenset[str] | None = None,
) -> HostList:
    """``GET /v1/hosts`` and ``datum hosts``: a page of hosts by name (``state``, ``after``), or with ``worst``
    the first ``limit`` worst first as the page lists them; of ``groups``' hosts only when given (a token scoped to
    host groups); each with the reboot lease it holds. Whether the
    rollout in force holds a host back is the caller's to add (the server reads it from its own memory)."""
    if worst:
        found = worst_first(store, fleet.stale_after, now, [s.value for s in HOST_ORDER], limit, groups=groups)
    else:
        found = page(store, fleet.stale_after, now, state=state, after=after, limit=limit, groups=groups)
    leases = read_leases(store, groups=groups)
    listing = host_list(found)
    listing.hosts = [with_lease(row, leases) for row in listing.hosts]
    return listing


def reboot_list(store: Store, fleet: FleetSettings, blocked: str | None, groups: frozenset[str] | None = None) -> Reboots:
    """``GET /v1/reboots`` and ``datum reboots list``: who is rebooting, group by group, whose lease is overdue,
    who waits in each group's reboot_order; ``blocked``: why ``[fleet] reboot_block_query`` blocks every group
    (the server's last answer, the command's own ask); of ``groups`` and their hosts only, when given."""
    from datum.fleet.reboots import groups as every_group
    from datum.fleet.reboots import waiting_in_order

    leases = read_leases(store, groups=groups)
    queued = waiting_in_order(fleet, leases)
    return Reboots(
        limit=fleet.reboot_concurrency,
        timeout_seconds=fleet.reboot_timeout.total_seconds(),
        blocked=blocked,
        groups=[
            RebootGroup(
                group=g,
                rebooting=[lease_model(x) for x in leases.rebooting if x.group == g],
                overdue=[lease_model(x) for x in leases.overdue if x.group == g],
                waiting=queued.get(g, []),
            )
            for g in every_group(fleet, leases)
            if groups is None or g in groups
        ],
    )


def clear_lease(store: Store, host: str, force: bool, forcing: str = "--force") -> RebootLease:
    """``DELETE /v1/reboots/{host}`` and ``datum reboots clear``: ``datum.store.leases.cleared``, as the model."""
    return lease_model(cleared(store, host, force=force, forcing=forcing))


def overdue(reboots: Reboots) -> list[RebootLease]:
    """The leases past ``[fleet] reboot_timeout``, group by group."""
    return [x for g in reboots.groups for x in g.overdue]


def host_needs(
    hosts: Sequence[HostSummary], reboots: Reboots, rollout: Mapping[str, Any] | None,
    fleet_directory: str | None = None,
) -> list[Need]:
    """*Needs a human* under ``datum hosts``: the lines of these hosts, of overdue reboots, of a halted or paused
    rollout and of a fleet directory that cannot be served from (``datum.core.attention.decide``, what the page
    and ``GET /v1/attention`` decide)."""
    return decide(hosts=[h.dump() for h in hosts], overdue=[x.dump() for x in overdue(reboots)], rollout=rollout,
                  fleet_directory=fleet_directory)


def host_needs_served(served: Sequence[Need], hosts: Sequence[HostSummary], reboots: Reboots) -> list[Need]:
    """``host_needs`` through a server's API (``datum hosts --server``), as the server decided it: the lines of
    ``GET /v1/attention`` (``served``) that are not a reconciler's, its fleet directory's and its rollout's (no
    route answers their inputs), and its line of each host listed (a canary's saying so); a host listed beyond
    the ones it considered (its worst ``datum.web.view.MAX_HOSTS``), decided here from its row; overdue reboots
    from ``reboots``, as the store path. The same lines, in the same order, as ``host_needs`` through the store."""
    fleet_wide = [n for n in served if n.host is None and n.reconciler is None]
    theirs: dict[str, Need] = {}
    for n in served:
        if n.host is not None and n.reconciler is None and n.reason != REBOOT_OVERDUE:
            theirs.setdefault(n.host, n)
    rows = [h.dump() for h in hosts]
    lines = [line for row in rows if (line := theirs.get(str(row["host"])) or host_need(row)) is not None]
    return ordered([*fleet_wide, *lines, *decide(overdue=[x.dump() for x in overdue(reboots)])])

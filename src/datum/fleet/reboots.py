"""The server's side of the fleet's reboot budget: which group a host is in, and granting its lease.

The group is the node classification's (``nodes.yaml`` rules give ``group``;
a later rule's wins, as for ``vars``), from the host's name and the labels
``nodes.yaml`` gives it, never from the facts its agent sends (a claim:
``datum.fleet.nodes.group_of``); a host no rule gives one is in ``default``.
The limit and the
lease's lifetime are ``[fleet] reboot_concurrency`` and ``reboot_timeout``.
The grant itself is the store's (``datum.store.leases.take``): atomic across
requests and server replicas. Around it, here: the group's ``reboot_order``
(``nodes.yaml``), how long the host's ask holds its place (``[fleet]
reboot_request_ttl``, else two of its agent's intervals), and the Prometheus
block (``datum.fleet.promblock``), asked before the store's transaction so
that no lock is held while Prometheus answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path

from datum.config import FleetSettings
from datum.core.budget import DEFAULT_GROUP, Order
from datum.fleet.nodes import Rules, group_of
from datum.store.engine import Store
from datum.store.leases import REQUEST_TTL, Grant, Leases, take


def placed(directory: Path | None, host: str, labels: Mapping[str, str] | None = None) -> tuple[str, Order | None]:
    """``host``'s group (``labels``: those it was given at enrollment) and that group's ``reboot_order`` (None:
    first come, first served); a ``nodes.yaml`` that does not validate is a Problem (no lease without a group)."""
    rules = _rules(directory) if directory is not None else None
    if rules is None:
        return DEFAULT_GROUP, None
    group = group_of(rules, host, labels) or DEFAULT_GROUP
    return group, rules.order.get(group)


def group_for(directory: Path | None, host: str, labels: Mapping[str, str] | None = None) -> str:
    """``host``'s group; a ``nodes.yaml`` that does not validate is a Problem (no lease without a group)."""
    return placed(directory, host, labels)[0]


def intake_group(directory: Path | None, host: str, labels: Mapping[str, str] | None = None) -> str | None:
    """The group a report's intake records for ``host`` (``hosts.group_name``): by its name and labels, never
    the facts its agent sends (``group_of``), by ``nodes.yaml``'s rules as last read (a ``stat`` of it per
    report; read again when it changed); None (keep the stored one) when ``nodes.yaml`` does not validate."""
    from datum.core.findings import Problem

    try:
        return group_for(directory, host, labels)
    except Problem:
        return None


def _rules(directory: Path) -> Rules | None:
    """``directory``'s ``nodes.yaml`` (a Problem when it does not validate), None when it has none:
    the rules the manifests are composed from, remembered until the directory's files change
    (``datum.fleet.effective.rules_now``)."""
    from datum.fleet.effective import directory_of, rules_now
    from datum.fleet.nodes import NODES

    resolved = directory_of(directory)
    if not (resolved / NODES).is_file():
        return None
    return rules_now(resolved)


def request_ttl(fleet: FleetSettings, interval: float | None) -> timedelta:
    """How long an ask holds the host's place: ``[fleet] reboot_request_ttl``, else two of its agent's
    intervals (it asks again at each pass while it needs a reboot), else ``REQUEST_TTL``."""
    if fleet.reboot_request_ttl is not None:
        return fleet.reboot_request_ttl
    return timedelta(seconds=2 * interval) if interval else REQUEST_TTL


def block(fleet: FleetSettings) -> str | None:
    """Why no reboot lease is granted in any group now (the Prometheus block query), or None."""
    from datum.fleet.promblock import check

    return check(fleet.prometheus_url, fleet.reboot_block_query, fleet.prometheus_timeout.total_seconds()).why


def block_shown(fleet: FleetSettings) -> str | None:
    """``block`` as a reader sees it (the page, ``/metrics``, ``GET /v1/reboots``): the last answer, never
    waiting on Prometheus (``datum.fleet.promblock.shown``)."""
    from datum.fleet.promblock import shown

    return shown(fleet.prometheus_url, fleet.reboot_block_query, fleet.prometheus_timeout.total_seconds()).why


def ask(store: Store, fleet: FleetSettings, host: str, boot_id: str, interval: float | None = None) -> Grant:
    """Grant ``host`` a reboot lease in its group (by its name and labels, whatever facts it sends), or say why
    not (full, halted, out of turn, blocked)."""
    from datum.store.identities import labels_of

    group, order = placed(fleet.manifests, host, labels_of(store, host))
    blocked = block(fleet)
    grant = take(
        store, host, group, boot_id, fleet.reboot_concurrency, fleet.reboot_timeout,
        order=order, request_ttl=request_ttl(fleet, interval), blocked=blocked,
    )
    if grant.blocked is not None:
        from datum.fleet.promblock import count_refusal

        count_refusal()
    return grant


def _orders(fleet: FleetSettings) -> dict[str, Order]:
    """nodes.yaml's reboot_order by group; {} when there is none or it does not validate (the manifests say why)."""
    from datum.core.findings import Problem

    try:
        rules = _rules(fleet.manifests) if fleet.manifests is not None else None
    except Problem:
        return {}
    return {} if rules is None else rules.order


def waiting_in_order(fleet: FleetSettings, leases: Leases) -> dict[str, list[str]]:
    """The hosts waiting for a lease, group by group, in the group's reboot_order (else by name)."""
    from datum.core.budget import BY_NAME, in_order

    orders = _orders(fleet)
    by_group: dict[str, list[str]] = {}
    for w in leases.waiting:
        by_group.setdefault(w.group, []).append(w.host)
    return {g: in_order(orders.get(g, BY_NAME), hosts) for g, hosts in by_group.items()}


def groups(fleet: FleetSettings, leases: Leases) -> list[str]:
    """Every group the metrics and the page show: those nodes.yaml names, ``default``, and any with a lease."""
    return sorted(named_groups(fleet) | {lease.group for lease in leases.all} | {w.group for w in leases.waiting})


def named_groups(fleet: FleetSettings) -> set[str]:
    """``default`` and the groups nodes.yaml's rules give (none when it does not validate: the manifests say why)."""
    named = {DEFAULT_GROUP}
    if fleet.manifests is not None:
        from datum.core.findings import Problem

        try:
            rules = _rules(fleet.manifests)
        except Problem:
            rules = None
        named.update(r.group for r in rules or () if r.group is not None)
    return named

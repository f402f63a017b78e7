"""The server's side of the fleet's reboot budget: which group a host is in, and granting its lease.

The group is the node classification's (``nodes.yaml`` rules give ``group``;
a later rule's wins, as for ``vars``), from the host's name and the facts its
agent sends; a host no rule gives one is in ``default``. The limit and the
lease's lifetime are ``[fleet] reboot_concurrency`` and ``reboot_timeout``.
The grant itself is the store's (``datum.store.leases.take``): atomic across
requests and server replicas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from datum.config import FleetSettings
from datum.core.budget import DEFAULT_GROUP
from datum.store.engine import Store
from datum.store.leases import Grant, Leases, take


def group_for(directory: Path | None, host: str, facts: dict[str, Any]) -> str:
    """``host``'s group; a ``nodes.yaml`` that does not validate is a Problem (no lease without a group)."""
    if directory is None:
        return DEFAULT_GROUP
    from datum.fleet.nodes import NODES, group_of, load_rules

    if not (directory / NODES).is_file():
        return DEFAULT_GROUP
    return group_of(load_rules(directory), host, facts) or DEFAULT_GROUP


def ask(store: Store, fleet: FleetSettings, host: str, boot_id: str, facts: dict[str, Any]) -> Grant:
    """Grant ``host`` a reboot lease in its group, or say how full the group is."""
    group = group_for(fleet.manifests, host, facts)
    return take(store, host, group, boot_id, fleet.reboot_concurrency, fleet.reboot_timeout)


def groups(fleet: FleetSettings, leases: Leases) -> list[str]:
    """Every group the metrics and the page show: those nodes.yaml names, ``default``, and any with a lease."""
    named = {DEFAULT_GROUP, *(lease.group for lease in leases.all)}
    directory = fleet.manifests
    if directory is not None:
        from datum.core.findings import Problem
        from datum.fleet.nodes import NODES, load_rules

        if (directory / NODES).is_file():
            try:
                named.update(r.group for r in load_rules(directory) if r.group is not None)
            except Problem:
                pass  # a nodes.yaml that does not validate names no group (the manifests say why)
    return sorted(named)

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


def intake_group(directory: Path | None, host: str, facts: dict[str, Any] | None) -> str | None:
    """The group a report's intake records for ``host`` (``hosts.group_name``): from its name and the facts its
    agent sent with the report (``X-Datum-Facts``, as with its manifest request), by ``nodes.yaml``'s rules as
    last read (a ``stat`` of it per report; read again when it changed); None (keep the stored one) when the
    facts did not read or ``nodes.yaml`` does not validate."""
    if facts is None:
        return None
    if directory is None:
        return DEFAULT_GROUP
    from datum.core.findings import Problem
    from datum.fleet.nodes import group_of

    try:
        rules = _rules(directory)
    except Problem:
        return None
    return DEFAULT_GROUP if rules is None else group_of(rules, host, facts) or DEFAULT_GROUP


# nodes.yaml's rules per file, with the (inode, size, mtime) they were read at: read again only when it changed.
_RULES: dict[str, tuple[tuple[int, int, int], list[Any]]] = {}


def _rules(directory: Path) -> list[Any] | None:
    """The rules of ``directory``'s ``nodes.yaml`` (a Problem when it does not validate), None when it has none."""
    import os
    import stat

    from datum.fleet.nodes import NODES, load_rules

    path = directory / NODES
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    seen = _RULES.get(str(path))
    if seen is not None and seen[0] == stamp:
        return seen[1]
    rules = load_rules(directory)
    if len(_RULES) >= 100:
        _RULES.clear()
    _RULES[str(path)] = (stamp, rules)
    return rules


def ask(store: Store, fleet: FleetSettings, host: str, boot_id: str, facts: dict[str, Any]) -> Grant:
    """Grant ``host`` a reboot lease in its group, or say how full the group is."""
    group = group_for(fleet.manifests, host, facts)
    return take(store, host, group, boot_id, fleet.reboot_concurrency, fleet.reboot_timeout)


def groups(fleet: FleetSettings, leases: Leases) -> list[str]:
    """Every group the metrics and the page show: those nodes.yaml names, ``default``, and any with a lease."""
    return sorted(named_groups(fleet) | {lease.group for lease in leases.all})


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

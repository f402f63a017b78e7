"""Which hosts a token scoped to host groups may see (issue 37, item 3): the one filter every list adds.

A host's group is the one the intake recorded (``hosts.group_name``, from the host's authenticated name and
``nodes.yaml``'s server-side labels), never a claim of the request. Apart from ``datum.store.hosts`` so that
the tables keyed by host (leases, the pass archive) filter by it without importing the host rows' module.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from datum.store.engine import Store
from datum.store.schema import hosts

Groups = frozenset[str] | None  # the host groups a list shows; None: every group


def of_groups(groups: Groups) -> Any:
    """The ``hosts`` rows of ``groups`` (their recorded ``group_name``), None for every host: the one filter every
    list of a token scoped to host groups adds to its query (``datum.api.front.authz.scope_of``)."""
    return None if groups is None else hosts.c.group_name.in_(sorted(groups))


def hosts_of(column: Any, groups: Groups) -> Any:
    """``column`` (a host name) names a host of ``groups``, None for every host: for the tables keyed by host."""
    if groups is None:
        return None
    return column.in_(sa.select(hosts.c.host).where(of_groups(groups)))


def among(store: Store, names: Iterable[str], groups: Groups) -> set[str]:
    """Which of ``names`` are hosts of ``groups`` (every one of them for None): for the few hosts a rollout names."""
    wanted = set(names)
    if groups is None or not wanted:
        return wanted if groups is None else set()
    with store.connect() as conn:
        return set(conn.execute(sa.select(hosts.c.host).where(hosts.c.host.in_(sorted(wanted)), of_groups(groups))).scalars())

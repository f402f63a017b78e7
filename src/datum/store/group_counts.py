"""The fleet's hosts by group and state, kept by the database: ``hosts_group_status_counts``.

``/metrics`` carries ``datum_fleet_hosts{group,state}`` whatever ``[metrics] per_host`` says; a grouped
count of ``hosts`` at every scrape would read every host. The counts are a second count of ``hosts`` kept
by ``datum.store.status_counts`` (triggers on ``hosts`` in the transaction of every write, whoever writes),
by ``group_name`` beside the state; made by migration ``0018_host_groups``, read by
``datum.store.hosts.group_counts``.
"""

from __future__ import annotations

import sqlalchemy as sa

from datum.store.status_counts import compact, count_statuses, counts_table, drop_status_counts

TABLE = "hosts_group_status_counts"
BY = {"group_name": "group_name"}

counts = counts_table("hosts", TABLE, BY)


def install(conn: sa.Connection) -> None:
    """Count the hosts by group and state from now on, the hosts already there included (a migration's ``upgrade``)."""
    count_statuses("hosts", status_column="state", since_column=None, bind=conn, counts=TABLE, by=BY)


def uninstall(conn: sa.Connection) -> None:
    """Undo ``install`` (a migration's ``downgrade``)."""
    drop_status_counts("hosts", status_column="state", since_column=None, bind=conn, counts=TABLE)


def fold(engine: sa.Engine) -> bool:
    """Fold the delta log into one row per (group, state) (PostgreSQL); whether this call did it."""
    return compact(engine, "hosts", TABLE, BY)

"""The fleet's hosts by group and state, kept by the store (``datum.store.group_counts``), on SQLite and PostgreSQL:
exact through inserts, moves and deletes, and, on PostgreSQL, through the fold of its delta log."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from datum.store import open_store
from datum.store.group_counts import counts as kept
from datum.store.hosts import group_counts, take_pass
from datum.store.schema import hosts
from datum.store.status_counts import COMPACT_AT


def _report(host: str, state: str = "converged") -> dict[str, object]:
    return {"host": host, "state": state, "resources": []}


def test_the_counts_by_group_stay_exact_through_every_write_and_the_fold(store_url):
    store = open_store(store_url)
    now = datetime.now(UTC)
    for i in range(20):
        take_pass(store, f"web{i}", _report(f"web{i}"), group="web")
    take_pass(store, "db1", _report("db1"))  # no group known: default
    take_pass(store, "web0", _report("web0", "failed"))  # no group known: the stored one kept
    assert group_counts(store, 3.0, now) == {("web", "converged"): 19, ("web", "failed"): 1, ("default", "converged"): 1}
    # more moves than the log keeps before a read folds it (PostgreSQL: a delta row per statement that moves one)
    for i in range(COMPACT_AT // 2 + 11):  # the last (even) one leaves web1 in db and web2 failed
        with store.begin() as conn:
            conn.execute(sa.update(hosts).where(hosts.c.host == "web1").values(group_name="db" if i % 2 == 0 else "web"))
        with store.begin() as conn:
            conn.execute(sa.update(hosts).where(hosts.c.host == "web2").values(state="failed" if i % 2 == 0 else "converged"))
    with store.begin() as conn:
        conn.execute(sa.delete(hosts).where(hosts.c.host == "db1"))
    expected = {("web", "converged"): 17, ("web", "failed"): 2, ("db", "converged"): 1}
    assert group_counts(store, 3.0, now) == expected  # the read that folds
    assert group_counts(store, 3.0, now) == expected  # and after it
    with store.connect() as conn:
        rows = conn.execute(sa.select(sa.func.count()).select_from(kept)).scalar_one()
    assert rows <= 4  # one row per (group, state) left (SQLite keeps no more; PostgreSQL folded)
    store.dispose()

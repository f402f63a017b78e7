"""What docs/fleet.md's VACUUM notes rest on, on PostgreSQL: a report's update of ``hosts`` is never HOT (so a
fillfactor would not make it one, and the migrations set none), and each leaves one dead row version."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from datum.store import open_store
from datum.store.hosts import take_pass

pytestmark = pytest.mark.postgres

REPORTS = 50


def _stats(store) -> tuple[int, int, int]:
    with store.connect() as conn:
        row = conn.execute(sa.text(
            "SELECT n_tup_upd, n_tup_hot_upd, n_dead_tup FROM pg_stat_user_tables WHERE relname = 'hosts'"
        )).one()
    return int(row[0]), int(row[1]), int(row[2])


def test_a_reports_update_of_the_host_row_is_never_hot(pg_module_database):
    store = open_store(pg_module_database)
    with store.connect() as conn:
        options = conn.execute(sa.text("SELECT reloptions FROM pg_class WHERE relname = 'hosts'")).scalar()
    assert not options  # no fillfactor: it would buy no HOT update (the notes say why)
    start = datetime.now(UTC)
    for seq in range(1, REPORTS + 1):
        report = {"host": "web1", "state": "converged", "seq": seq, "passId": f"p{seq}", "intervalSeconds": 1800,
                  "finishedAt": (start + timedelta(seconds=seq)).isoformat(), "resources": []}
        assert take_pass(store, "web1", report, history=True).outcome == "stored"
    store.dispose()  # its backends exit: their statistics are flushed
    reader = open_store(pg_module_database)
    try:
        deadline = time.monotonic() + 15
        while (found := _stats(reader))[0] < REPORTS - 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        updated, hot, _dead = found
        assert updated >= REPORTS - 1  # the first report inserted the row; every other one updated it
        assert hot == 0  # finished_at, which ix_hosts_finished_at indexes, changes with every report
    finally:
        reader.dispose()

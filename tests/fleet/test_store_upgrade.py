"""Migration 0003 on a store that exists: hosts gain pass id and sequence, tokens gain their host binding."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from datum.api.front.tokens import TokenBook, create
from datum.store import open_store
from datum.store.hosts import get_host, record_pass

from .migrated import at_revision

pytestmark = pytest.mark.empty_store  # stores left at older migrations, or migrated here: made empty


def _report(seq: int | None, pass_id: str, state: str = "converged") -> dict:
    report = {"host": "web1", "state": state, "finishedAt": "2026-11-30T00:00:00+00:00", "passId": pass_id}
    return report | ({"seq": seq} if seq is not None else {})


def test_a_store_at_0002_with_tokens_gains_the_binding_and_the_sequence(store_url):
    with at_revision(store_url, "0002") as conn:
        conn.execute(sa.text(
            "CREATE TABLE tokens (sha256 VARCHAR(64) PRIMARY KEY, principal VARCHAR(100) NOT NULL,"
            " created_at TIMESTAMP NOT NULL)"
        ))
    store = open_store(store_url)
    try:
        token = create(store, "agent", "web1")
        assert TokenBook({}, store).principal(token) == "agent@host:web1"
        assert TokenBook({}, store).principal(create(store, "agent")) == "agent"
        assert record_pass(store, "web1", _report(5, "a")) == "stored"
        assert record_pass(store, "web1", _report(5, "a")) == "duplicate"
        assert record_pass(store, "web1", _report(4, "b", "failed")) == "older"
        assert record_pass(store, "web1", _report(6, "c", "failed")) == "stored"
        row = get_host(store, "web1")
        assert (row["seq"], row["passId"], row["state"]) == (6, "c", "failed")
        assert record_pass(store, "web1", _report(None, "apply")) == "stored"  # datum apply --report-to
    finally:
        store.dispose()


def test_migration_0011_gives_the_summaries_of_hosts_awaiting_a_reboot_their_reboot(store_url):
    """A host awaiting a reboot by hand is one from the first listing after the upgrade, not after its next pass."""
    import json
    from datetime import UTC, datetime

    from datum.api.models import host_summary
    from datum.core.attention import host_need
    from datum.store.hosts import host_page

    reboot = {"required": True, "policy": "manual", "bootId": "b1", "markers": {"/run/reboot-required": 1}}
    reports = {
        "web1": {"host": "web1", "state": "awaiting-reboot", "reboot": reboot, "resources": []},
        "web2": {"host": "web2", "state": "converged", "resources": []},
    }
    with at_revision(store_url, "0010_history_pass_id") as conn:
        for host, report in reports.items():
            conn.execute(
                sa.text("INSERT INTO hosts (host, state, updated_at, report, summary) VALUES (:h, :s, :u, :r, :m)"),
                {"h": host, "s": report["state"], "u": datetime.now(UTC), "r": json.dumps(report),
                 "m": json.dumps({"counts": {}, "attention": []})},
            )
    store = open_store(store_url)
    try:
        rows = {r["host"]: host_summary(r) for r in host_page(store, 3.0, datetime.now(UTC), limit=10)}
        assert rows["web1"].reboot is not None and rows["web1"].reboot.policy.value == "manual"
        assert rows["web1"].reboot.markers is None  # the summary leaves the markers in the report
        assert rows["web2"].reboot is None
        line = host_need(rows["web1"].dump())
        assert line is not None and line.reason == "manual_reboot"
    finally:
        store.dispose()


def test_migration_0013_keeps_the_host_history_already_there_as_passes_received_and_finished_then(store_url):
    """Rows of pass_history from before every pass was kept list as passes finished when they were received
    (the only time they have), without a report; a pass taken after the upgrade is kept whole."""
    from datetime import UTC, datetime, timedelta

    from datum.fleet.history import passes_page
    from datum.store.hosts import take_pass
    from datum.store.passes import one_pass

    then = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    with at_revision(store_url, "0012_summary_reboot") as conn:
        conn.execute(sa.text(
            "INSERT INTO pass_history (subject, name, at, outcome, completed, drift, blocked, counts, pass_id)"
            " VALUES ('host', 'web1', :at, 'failed', :t, 1, 0, :c, 'old')"
        ), {"at": then, "t": True, "c": '{"failed": 1}'})
    store = open_store(store_url)
    try:
        later = _report(7, "new") | {"finishedAt": (then + timedelta(hours=1)).isoformat(), "resources": []}
        assert take_pass(store, "web1", later, history=True).outcome == "stored"
        rows = passes_page(store, "web1").rows
        assert [(r["passId"], r["finishedAt"], r["state"]) for r in rows] == [
            ("new", then + timedelta(hours=1), "converged"), ("old", then, "failed"),
        ]
        old = one_pass(store, "web1", "old")
        assert old is not None and old["report"] is None and "not kept" in old["unreadable"]
        assert one_pass(store, "web1", "new")["report"]["passId"] == "new"
    finally:
        store.dispose()

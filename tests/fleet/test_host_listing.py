"""The host rows as intake writes them and the listing reads them, on SQLite and PostgreSQL.

Intake writes a summary beside each report and, for the page's strip, a history
row (on PostgreSQL in the same statement as the host row); the listing pages
through the summaries by name, filters by the state a host reads (the stale
rule included) and counts the whole fleet, without reading a report.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from datum.core.hostsummary import ATTENTION_CAP
from datum.fleet.listing import cursor_after, host_after, page
from datum.fleet.stale import stale
from datum.store import open_store
from datum.store.history import HOST, KEYFRAME, STRIP, recent, recent_many
from datum.store.hosts import get_host, take_pass

from .migrated import at_revision

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def report(host: str, seq: int | None = None, *, failed: int = 0, finished: datetime = NOW,
           interval: float | None = None, incomplete: bool = False) -> dict:
    resources = [
        {"id": f"File[/f{n}]", "type": "File", "name": f"/f{n}", "action": "update",
         "state": "failed" if n < failed else "converged", "diff": "--- a\n+++ b\n"}
        for n in range(max(failed, 2))
    ]
    doc = {"host": host, "mode": "enforce", "state": "failed" if failed else "converged",
           "finishedAt": finished.isoformat(), "passId": f"{host}-{seq}", "manifestDigest": "sha256:abc",
           "resources": resources}
    if seq is not None:
        doc["seq"] = seq
    if interval is not None:
        doc["intervalSeconds"] = interval
    if incomplete:
        doc["incomplete"] = True
    return doc


def test_the_sequence_rule_holds_with_the_history_row_in_the_same_write(store):
    assert take_pass(store, "web1", report("web1", 5), history=True).outcome == "stored"
    assert take_pass(store, "web1", report("web1", 5), history=True).outcome == "duplicate"
    for _ in range(2):  # the older one sent again: one history row all the same
        older = take_pass(store, "web1", report("web1", 4, failed=1, incomplete=True), history=True)
        assert older.outcome == "older" and older.row["seq"] == 5
    taken = take_pass(store, "web1", report("web1", 6, failed=1), history=True)
    assert taken.outcome == "stored" and taken.row["state"] == "failed"
    assert get_host(store, "web1")["seq"] == 6
    with store.connect() as conn:
        rows = recent(conn, HOST, "web1")
    # one history row per stored pass and per older one (where it arrived, once); none for the duplicate
    assert [(r.outcome, r.completed) for r in rows] == [("converged", True), ("failed", False), ("failed", True)]
    assert rows[2].items == {"File[/f0]": "failed"} and rows[2].counts == {"failed": 1, "converged": 1}
    assert rows[0].items == {}


def test_history_items_are_stored_only_when_they_change_or_a_keyframe_is_due(store):
    for seq in range(1, KEYFRAME + 4):
        take_pass(store, "web1", report("web1", seq, failed=1 if seq >= 3 else 0), history=True)
    take_pass(store, "web1", report("web1", KEYFRAME + 4, failed=1, incomplete=True), history=True)
    with store.connect() as conn:
        stored = conn.execute(
            sa.text("SELECT items FROM pass_history WHERE subject = 'host' ORDER BY id")
        ).scalars().all()
        rows = recent(conn, HOST, "web1", KEYFRAME + 10)
    written = [i for i, items in enumerate(stored) if items is not None]
    # the first pass, the change at pass 3, the keyframe KEYFRAME rows after it; never the incomplete pass
    assert written == [0, 2, 2 + KEYFRAME]
    assert stored[-1] is None and rows[-1].items is None and not rows[-1].completed
    assert all(r.items == {"File[/f0]": "failed"} for r in rows[2:-1])


def test_the_keyframe_counts_the_rows_after_the_last_map_though_they_share_its_millisecond(store):
    """Passes taken faster than the store's clock moves (SQLite's is in milliseconds) share a receipt time: the
    rows counted since the last map are those after it in the order that picks it (time, then id), so a row of
    the same millisecond before it does not bring the next map early (it did: a flaky [0, 2, 51])."""
    same = datetime(2026, 12, 7, 4, 20, tzinfo=UTC)
    for seq in range(1, KEYFRAME + 4):
        take_pass(store, "web1", report("web1", seq, failed=1 if seq >= 3 else 0), history=True)
        with store.begin() as conn:  # every row received in the one millisecond
            conn.execute(sa.text("UPDATE pass_history SET at = :at WHERE subject = 'host' AND name = 'web1'"),
                         {"at": same.replace(tzinfo=None) if store.dialect == "sqlite" else same})
    with store.connect() as conn:
        stored = conn.execute(
            sa.text("SELECT items FROM pass_history WHERE subject = 'host' ORDER BY id")
        ).scalars().all()
    assert [i for i, items in enumerate(stored) if items is not None] == [0, 2, 2 + KEYFRAME]


def test_the_pages_strips_read_at_once_are_each_hosts_own(store):
    """``recent_many`` (the page's hosts in two statements on PostgreSQL) says what ``recent`` says of each:
    a strip that starts after its last keyframe reads its items back from an older row, a host with no pass
    has an empty strip, a name asked twice is answered once."""
    for seq in range(1, KEYFRAME + 12):  # web1's strip of STRIP rows starts past the keyframe of its first change
        take_pass(store, "web1", report("web1", seq, failed=1 if seq >= 3 else 0), history=True)
    for seq in range(1, 4):
        take_pass(store, "web2", report("web2", seq, failed=seq % 2), history=True)
    with store.connect() as conn:
        many = recent_many(conn, HOST, ["web2", "web1", "nobody", "web1"])
        assert many == {name: recent(conn, HOST, name) for name in ("web2", "web1", "nobody")}
    assert len(many["web1"]) == STRIP and many["nobody"] == []
    assert many["web1"][0].items == {"File[/f0]": "failed"}  # read back from the row before the strip
    assert [r.outcome for r in many["web2"]] == ["failed", "converged", "failed"]


def test_the_hosts_per_revision_are_the_database_s_counts_and_say_what_every_host_reads(store):
    """``running`` reads the counts the database keeps per revision and state (``hosts_revision_status_counts``), the
    stale hosts moved to unknown: the same as a grouped read of every host, through moves between revisions,
    a pass that names none, an older pass (no move) and a host gone silent."""
    from collections import Counter

    from datum.store.hosts import host_state_at
    from datum.store.revisions import running
    from datum.store.schema import hosts

    def ran(host: str, seq: int, revision: str | None, *, failed: int = 0, finished: datetime = NOW) -> None:
        doc = report(host, seq, failed=failed, finished=finished, interval=60)
        if revision is not None:
            doc["revision"] = revision
        take_pass(store, host, doc, history=True)

    for i in range(6):
        ran(f"web{i}", 1, "rev-a", failed=i % 2)
    ran("web0", 2, "rev-b")  # moves from a to b
    ran("web1", 2, "rev-b", failed=1)
    ran("web2", 3, None)  # a pass that names no revision (a cached manifest)
    ran("web3", 1, "rev-c")  # its stored pass sent again (same seq): not stored, no move
    ran("web9", 1, "rev-b", finished=NOW - timedelta(hours=2))  # silent since: unknown
    now = NOW + timedelta(seconds=30)

    state = host_state_at(store.dialect, 3.0, now)
    revision = hosts.c.summary["revision"].as_string()
    oracle: dict[str | None, Counter] = {}
    with store.connect() as conn:
        for rev, st, n in conn.execute(sa.select(revision, state, sa.func.count()).group_by(revision, state)):
            oracle.setdefault(rev or None, Counter())[st] += n
    found = running(store, 3.0, now)
    assert found == oracle
    assert found == {
        "rev-a": Counter({"converged": 1, "failed": 2}),
        "rev-b": Counter({"converged": 1, "failed": 1, "unknown": 1}),
        None: Counter({"converged": 1}),
    }


def test_host_history_is_not_pruned_at_intake_but_by_the_archives_retention(store):
    from datum.store.passes import retain

    take_pass(store, "web1", report("web1", 1), history=True)
    with store.begin() as conn:
        conn.execute(sa.text("UPDATE pass_history SET at = :at"), {"at": datetime(2020, 1, 1, tzinfo=UTC)})
    take_pass(store, "web1", report("web1", 2), history=True)
    with store.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM pass_history")).scalar() == 2  # intake drops nothing
    assert retain(store, timedelta(days=1)) == 1
    with store.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM pass_history")).scalar() == 1


def test_a_page_walk_lists_every_host_once_in_order_with_the_fleets_counts(store):
    names = [f"h{n:03d}" for n in range(23)]
    for n, name in enumerate(names):
        take_pass(store, name, report(name, 1, failed=1 if n % 5 == 0 else 0))
    seen, after, pages = [], None, 0
    while True:
        found = page(store, 3.0, NOW, after=after, limit=5)
        assert found.counts["failed"] == 5 and found.counts["converged"] == 18 and found.counts["unknown"] == 0
        seen += [r["host"] for r in found.hosts]
        pages += 1
        if found.next is None:
            break
        after = host_after(found.next)
    assert seen == names and pages == 5
    failed = page(store, 3.0, NOW, state="failed", limit=100)
    assert [r["host"] for r in failed.hosts] == names[::5] and failed.next is None
    (row,) = page(store, 3.0, NOW, state="failed", limit=1, after="h004").hosts
    assert row["host"] == "h005" and row["summary"]["counts"] == {"failed": 1, "converged": 1}
    assert row["summary"]["attention"] == [
        {"id": "File[/f0]", "type": "File", "name": "/f0", "action": "update", "state": "failed"}
    ]
    assert row["summary"]["manifestDigest"] == "sha256:abc"


def test_the_stale_rule_applies_to_rows_filter_and_counts_as_it_does_to_one_host(store):
    quiet = report("quiet", 1, finished=NOW - timedelta(hours=2), interval=1800)  # 4 intervals: stale at 3
    live = report("live", 1, finished=NOW - timedelta(minutes=80), interval=1800)  # 2.7 intervals: not yet
    once = report("once", None, finished=NOW - timedelta(days=9))  # datum apply: no schedule to miss
    for doc in (quiet, live, once):
        take_pass(store, doc["host"], doc)
    found = page(store, 3.0, NOW)
    by_host = {r["host"]: r for r in found.hosts}
    for name in ("quiet", "live", "once"):
        one = stale(get_host(store, name), 3.0, NOW)
        assert by_host[name]["state"] == one["state"], name
        assert by_host[name]["reason"] == one["reason"], name
        assert by_host[name]["stale"] == one.get("stale", False), name
    assert by_host["quiet"]["stale"] and not by_host["live"]["stale"] and not by_host["once"]["stale"]
    assert found.counts["unknown"] == 1 and found.counts["converged"] == 2
    assert [r["host"] for r in page(store, 3.0, NOW, state="unknown").hosts] == ["quiet"]
    assert [r["host"] for r in page(store, 3.0, NOW, state="converged").hosts] == ["live", "once"]
    assert page(store, 5.0, NOW).counts["unknown"] == 0  # the multiple is the server's setting, read now


def test_a_summary_keeps_at_most_the_cap_of_resources_and_says_how_many(store):
    take_pass(store, "big", report("big", 1, failed=ATTENTION_CAP + 5))
    (row,) = page(store, 3.0, NOW).hosts
    assert len(row["summary"]["attention"]) == ATTENTION_CAP
    assert row["summary"]["attentionTotal"] == ATTENTION_CAP + 5
    assert all("diff" not in r for r in row["summary"]["attention"])


def test_a_cursor_round_trips_and_a_foreign_one_is_refused():
    assert host_after(cursor_after("web-01.example.com")) == "web-01.example.com"
    for bad in ("", "not base64!", cursor_after("x")[:-2] + "@@", "aDo"):  # "aDo" is "h:" with no name
        with pytest.raises(ValueError, match="not a cursor"):
            host_after(bad)


@pytest.mark.empty_store  # a store left at an older migration: made empty, not a copy of the migrated one
def test_the_migration_fills_in_the_summaries_of_hosts_already_there(store_url):
    with at_revision(store_url, "0005") as conn:
        for host, doc in (("web1", report("web1", 1, failed=1, interval=60)), ("bad", None)):
            conn.execute(
                sa.text("INSERT INTO hosts (host, state, updated_at, report, seq) VALUES (:h, 'failed', :at, :r, 1)"),
                {"h": host, "at": NOW, "r": "[1, 2]" if doc is None else json.dumps(doc)},
            )
    store = open_store(store_url)
    try:
        rows = {r["host"]: r for r in page(store, 3.0, NOW).hosts}
        assert rows["web1"]["summary"]["counts"] == {"failed": 1, "converged": 1}
        assert rows["web1"]["intervalSeconds"] == 60.0
        assert rows["bad"]["summary"] == {"counts": {}, "attention": []}
    finally:
        store.dispose()


def test_datum_hosts_pages_the_same_listing(store_url, tmp_path, datum_cli):
    cfg = tmp_path / "datum.toml"
    cfg.write_text(f'store = "{store_url}"\n')
    store = open_store(store_url)
    try:
        for n in range(3):
            take_pass(store, f"web{n}", report(f"web{n}", 1, failed=1 if n == 1 else 0))
    finally:
        store.dispose()
    code, out, err = datum_cli("hosts", "--config", str(cfg), "--limit", "2")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "3 hosts  failed 1  converged 2"  # the page's order, worst first
    assert [line.split()[0] for line in lines[3:5]] == ["web1", "web0"]  # worst first, as the page
    assert lines[-1].startswith("the 2 worst of 3 hosts; the others: datum hosts --state STATE, or --by-name")
    code, out, err = datum_cli("hosts", "--config", str(cfg), "--limit", "2", "--by-name")
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[3:5]] == ["web0", "web1"]
    nxt = lines[-1].split("--cursor ")[1]
    code, out, err = datum_cli("hosts", "--config", str(cfg), "--json", "--limit", "2", "--cursor", nxt)
    doc = json.loads(out)
    assert [h["host"] for h in doc["hosts"]] == ["web2"] and "next" not in doc and doc["total"] == 3
    code, out, _ = datum_cli("hosts", "--config", str(cfg), "--json", "--state", "failed")
    assert [h["host"] for h in json.loads(out)["hosts"]] == ["web1"]
    code, out, _ = datum_cli("hosts", "--config", str(cfg), "--json", "--cursor", "bogus")
    assert code == 65 and json.loads(out)["issues"][0]["fields"][0]["field"] == "--cursor"

"""The queries a server runs per request at 100,000 hosts are answered from an index (issue 26), on PostgreSQL.

Each function is run as the server runs it, every statement it sends is captured, and PostgreSQL is
asked for the plan of each with sequential scans priced out (``enable_seqscan = off``): a plan that
still scans ``hosts`` or ``pass_history`` whole has no index that could serve it. The fleet is made
in the database (20,000 hosts, their history), and analysed, so the planner sees a fleet, not a toy.

The fleet's counts by state are the database's own (``hosts_status_counts``, kept by triggers), and
the stale hosts are found through ``finished_at`` (none can be stale before ``stale_after`` of the
fleet's shortest interval): the counts every page carries and the ``unknown`` filter read no more
hosts than are stale. Anything that starts scanning a table whole fails here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from datum.fleet.listing import cursor_after, host_after
from datum.store import open_store
from datum.store.history import HOST, recent
from datum.store.hosts import get_host, host_counts, host_page, take_pass
from datum.store.passes import After, fleet_events, host_passes, one_pass
from datum.store.revisions import running

pytestmark = pytest.mark.postgres

HOSTS = 20_000
STALE = 37  # hosts whose agents fell silent a day ago
EVENTS = 200_000


@pytest.fixture(scope="module")
def fleet(pg_module_database) -> Iterator[Any]:
    store = open_store(pg_module_database)
    with store.begin() as conn:
        conn.execute(sa.text(f"""
            INSERT INTO hosts (host, state, reason, finished_at, updated_at, report, summary, interval_seconds, seq)
            SELECT 'web' || lpad(i::text, 6, '0'),
                   CASE WHEN i % 100 = 0 THEN 'failed' WHEN i % 50 = 0 THEN 'drifted' ELSE 'converged' END,
                   NULL, now() - interval '1 minute', now(), '{{}}'::jsonb, '{{"counts": {{"converged": 50}}}}'::jsonb,
                   1800, 1
            FROM generate_series(1, {HOSTS}) AS i
        """))
        conn.execute(sa.text(f"UPDATE hosts SET finished_at = now() - interval '1 day' WHERE host > 'web{HOSTS - STALE:06d}'"))
        conn.execute(sa.text(f"""
            INSERT INTO pass_history (subject, name, at, outcome, completed, drift, blocked, counts)
            SELECT 'host', 'web' || lpad((i % {HOSTS} + 1)::text, 6, '0'), now() - (i || ' seconds')::interval,
                   'converged', true, 0, 0, '{{}}'::jsonb
            FROM generate_series(1, {HOSTS * 5}) AS i
        """))
        # The fleet's events: 4 types, 2,000 resources, a few failed or drifted among the changes.
        conn.execute(sa.text(f"""
            INSERT INTO pass_events (pass_row, host, finished_at, received_at, resource, type, action, state, changed)
            SELECT i, 'web' || lpad((i % {HOSTS} + 1)::text, 6, '0'), now() - (i || ' seconds')::interval,
                   now() - (i || ' seconds')::interval,
                   (ARRAY['File', 'Package', 'Service', 'Exec'])[i % 4 + 1] || '[r' || (i % 500) || ']',
                   (ARRAY['File', 'Package', 'Service', 'Exec'])[i % 4 + 1], 'update',
                   CASE WHEN i % 97 = 0 THEN 'failed' WHEN i % 89 = 0 THEN 'drifted' ELSE 'converged' END, true
            FROM generate_series(1, {EVENTS}) AS i
        """))
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE"))
    yield store
    store.dispose()


@contextmanager
def captured(store: Any) -> Iterator[list[tuple[str, Any]]]:
    """Every statement ``store``'s engine sends meanwhile, with its parameters."""
    sent: list[tuple[str, Any]] = []

    def seen(_conn, _cursor, statement, parameters, _context, _many):  # type: ignore[no-untyped-def]
        sent.append((statement, parameters))

    sa.event.listen(store.engine, "before_cursor_execute", seen)
    try:
        yield sent
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", seen)


def scans(store: Any, run: Callable[[], Any]) -> list[tuple[str, str]]:
    """The (node type, table) of every scan in the plans of the statements ``run`` sends."""
    return [found for plan in plans(store, run) for found in _scans(plan)]


def _scans(node: Any) -> Iterator[tuple[str, str]]:
    if isinstance(node, list):
        for n in node:
            yield from _scans(n)
    elif isinstance(node, dict):
        if "Relation Name" in node:
            yield node["Node Type"], node["Relation Name"]
        for value in node.values():
            if isinstance(value, list | dict):
                yield from _scans(value)


def whole(found: list[tuple[str, str]]) -> set[str]:
    """The tables scanned whole; a count table (a row per state, and its deltas until folded) is small by design."""
    return {table for kind, table in found if kind == "Seq Scan" and not table.endswith("_status_counts")}


NOW = datetime.now(UTC)


@pytest.mark.parametrize(
    "name, run",
    [
        ("a page of the listing", lambda s: host_page(s, 3.0, NOW, limit=101)),
        ("a page after a cursor", lambda s: host_page(s, 3.0, NOW, after=host_after(cursor_after("web010000")), limit=101)),
        ("one state's page (the page's worst first)", lambda s: host_page(s, 3.0, NOW, state="failed", limit=101)),
        ("one state's page after a cursor", lambda s: host_page(s, 3.0, NOW, state="drifted", after="web010000", limit=101)),
        ("one host", lambda s: get_host(s, "web012345")),
        ("a host's history strip", lambda s: _recent(s, "web012345")),
        ("the fleet's counts by state", lambda s: host_counts(s, 3.0, NOW)),
        ("the hosts per revision (datum rollout status, the page)", lambda s: running(s, 3.0, NOW)),
        ("the unknown hosts' page", lambda s: host_page(s, 3.0, NOW, state="unknown", limit=101)),
        ("taking a report (intake)", lambda s: take_pass(s, "web000007", _report("web000007"), history=True)),
    ],
)
def test_a_request_reads_through_an_index(fleet, name, run):
    assert whole(scans(fleet, lambda: run(fleet))) == set(), name


def test_the_counts_are_the_fleets_with_the_stale_hosts_unknown(fleet):
    counts = host_counts(fleet, 3.0, NOW)
    assert sum(counts.values()) == HOSTS
    assert counts["unknown"] == STALE
    fresh = HOSTS - STALE  # the others said what they said
    assert counts["failed"] == fresh // 100 and counts["drifted"] == fresh // 50 - fresh // 100
    page = host_page(fleet, 3.0, NOW, state="unknown", limit=101)
    assert [r["host"] for r in page] == [f"web{i:06d}" for i in range(HOSTS - STALE + 1, HOSTS + 1)]


def plans(store: Any, run: Callable[[], Any]) -> list[dict[str, Any]]:
    """The plan of every statement ``run`` sends (sequential scans priced out), as PostgreSQL's JSON."""
    with captured(store) as sent:
        run()
    found: list[dict[str, Any]] = []
    with store.engine.connect() as conn:
        conn.exec_driver_sql("SET enable_seqscan = off")
        for statement, parameters in sent:
            if statement.lstrip().upper().startswith(("SELECT", "WITH", "INSERT", "UPDATE", "DELETE")):
                plan = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {statement}", parameters).scalar_one()
                found.append((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"])
        conn.rollback()
    assert found, "nothing was captured: the test would prove nothing"
    return found


def _nodes(node: dict[str, Any], limited: bool = False) -> Iterator[tuple[dict[str, Any], bool]]:
    """Every node of a plan, with whether a ``Limit`` above it bounds what it reads."""
    limited = limited or node.get("Node Type") == "Limit"
    yield node, limited
    for child in node.get("Plans", []):
        yield from _nodes(child, limited)


FLEET_TABLES = ("hosts", "pass_history", "pass_events", "pass_reports")


def read_whole(found: list[dict[str, Any]]) -> set[str]:
    """The fleet's tables (hosts, the archive's passes, events and reports, partitions included) some statement
    reads whole: a sequential scan, or an index scanned end to end (no index condition, no ``Limit`` above it)."""
    whole: set[str] = set()
    for plan in found:
        for node, limited in _nodes(plan):
            table = node.get("Relation Name", "")
            if not table.startswith(FLEET_TABLES) or table.endswith("_status_counts"):
                continue
            if node["Node Type"] == "Seq Scan" or (
                "Index" in node["Node Type"] and "Index Cond" not in node and not limited
            ):
                whole.add(table)
    return whole


def index_conditions(found: list[dict[str, Any]], table: str) -> list[str]:
    """The index conditions of the scans of ``table`` (or its partitions)."""
    return [node.get("Index Cond", "") for plan in found for node, _ in _nodes(plan)
            if node.get("Relation Name", "").startswith(table)]


@pytest.mark.parametrize(
    "name, run, column",
    [
        ("the fleet's events", lambda s: fleet_events(s, limit=101), None),
        ("events after a cursor", lambda s: fleet_events(s, after=After(NOW, 10**9), limit=101), None),
        ("events in a window", lambda s: fleet_events(s, since=NOW - timedelta(hours=1), limit=101), None),
        ("one resource's events", lambda s: fleet_events(s, resource="Service[r6]", limit=101), "resource"),
        ("one resource's events after a cursor",
         lambda s: fleet_events(s, resource="Service[r6]", after=After(NOW - timedelta(hours=3), 10**9), limit=101),
         "resource"),
        ("one type's events", lambda s: fleet_events(s, type="Exec", limit=101), "type"),
        ("one type's events in a window",
         lambda s: fleet_events(s, type="Exec", since=NOW - timedelta(days=1), limit=101), "type"),
        ("the failed events", lambda s: fleet_events(s, state="failed", limit=101), "state"),
        ("one host's events", lambda s: fleet_events(s, host="web000042", limit=101), "host"),
        ("a host's kept passes", lambda s: host_passes(s, "web000042", limit=101), None),
        ("a host's kept passes by state", lambda s: host_passes(s, "web000042", state="failed", limit=101), None),
        ("one kept pass with its report and events", lambda s: one_pass(s, "web000042", "1234"), None),
    ],
)
def test_the_history_and_events_are_read_through_an_index(fleet, name, run, column):
    found = plans(fleet, lambda: run(fleet))
    assert read_whole(found) == set(), name
    if column is not None:  # the filter is the index's range, not a filter over every newer event
        assert any(column in cond for cond in index_conditions(found, "pass_events")), (name, found)


@pytest.mark.parametrize("shown, changes", [((None, None), "1h"), (("failed", None), "1d"),
                                            (("converged", "web010000"), "1h"), (("unknown", None), None)])
def test_the_pages_overview_reads_through_an_index_end_to_end(fleet, shown, changes):
    """Every statement of the page's overview (``/ui/overview``): the hosts worst first or one state's page with
    their history strips, the fleet's counts, the leases, the timeline and the hosts per revision."""
    from datum.api.routes.ui import HostsShown, _view
    from datum.config import Settings
    from datum.fleet.rollouts.status import ORIGINS_ON_PAGE, status
    from datum.reconcile.registry import Registry

    settings = Settings.model_validate({"server": {"scheduler": False}})
    found = plans(fleet, lambda: _view(
        [], Registry(), settings, fleet, HostsShown(*shown), changes,
        lambda: status(fleet, settings.fleet.stale_after, datetime.now(UTC), None, origins=ORIGINS_ON_PAGE),  # as ui.py
    ))
    assert read_whole(found) == set()


def test_the_stricter_check_sees_a_whole_index_read(fleet):
    """``read_whole`` itself: a grouped count of every host, which an index serves end to end, is a whole read."""
    found = plans(fleet, lambda: _grouped(fleet))
    assert read_whole(found) == {"hosts"}


def _grouped(store: Any) -> None:
    with store.connect() as conn:
        conn.execute(sa.text("SELECT state, count(*) FROM hosts GROUP BY state")).all()


def _recent(store: Any, host: str) -> Any:
    with store.connect() as conn:
        return recent(conn, HOST, host)


def _report(host: str) -> dict[str, Any]:
    return {"host": host, "state": "converged", "finishedAt": NOW.isoformat(), "intervalSeconds": 1800,
            "seq": 2, "passId": "p-plan", "resources": []}

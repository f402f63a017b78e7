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
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from datum.fleet.listing import cursor_after, host_after
from datum.store import open_store
from datum.store.history import HOST, recent
from datum.store.hosts import get_host, host_counts, host_page, take_pass
from datum.store.revisions import running

pytestmark = pytest.mark.postgres

HOSTS = 20_000
STALE = 37  # hosts whose agents fell silent a day ago


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
    with captured(store) as sent:
        run()
    found: list[tuple[str, str]] = []
    with store.engine.connect() as conn:
        conn.exec_driver_sql("SET enable_seqscan = off")
        for statement, parameters in sent:
            if not statement.lstrip().upper().startswith(("SELECT", "WITH", "INSERT", "UPDATE", "DELETE")):
                continue
            plan = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {statement}", parameters).scalar_one()
            found += list(_scans(plan if isinstance(plan, list) else json.loads(plan)))
        conn.rollback()
    assert found, "nothing was captured: the test would prove nothing"
    return found


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


def _recent(store: Any, host: str) -> Any:
    with store.connect() as conn:
        return recent(conn, HOST, host)


def _report(host: str) -> dict[str, Any]:
    return {"host": host, "state": "converged", "finishedAt": NOW.isoformat(), "intervalSeconds": 1800,
            "seq": 2, "passId": "p-plan", "resources": []}

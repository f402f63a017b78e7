"""The queries a server runs per request at 100,000 hosts are answered from an index (issue 26), on PostgreSQL.

Each function is run as the server runs it, every statement it sends is captured, and PostgreSQL is
asked for the plan of each with sequential scans priced out (``enable_seqscan = off``): a plan that
still scans ``hosts`` or ``pass_history`` whole has no index that could serve it. The fleet is made
in the database (20,000 hosts, their history), and analysed, so the planner sees a fleet, not a toy.

What is known to read every host is named in ``WHOLE``: the fleet's counts by state and the
``unknown`` filter (a host's staleness depends on the scrape's now and its own interval, which no
index orders today). Anything else that starts scanning a table whole fails here.
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

pytestmark = pytest.mark.postgres

HOSTS = 20_000
# Tables a statement of the listed kind may scan whole, and why.
WHOLE = {"host_counts": "the fleet's counts by state: an aggregate over every host"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Iterator[Any]:
    from conftest import _pg_database

    urls = _pg_database()
    url = next(urls)
    store = open_store(url)
    with store.begin() as conn:
        conn.execute(sa.text(f"""
            INSERT INTO hosts (host, state, reason, finished_at, updated_at, report, summary, interval_seconds, seq)
            SELECT 'web' || lpad(i::text, 6, '0'),
                   CASE WHEN i % 100 = 0 THEN 'failed' WHEN i % 50 = 0 THEN 'drifted' ELSE 'converged' END,
                   NULL, now() - interval '1 minute', now(), '{{}}'::jsonb, '{{"counts": {{"converged": 50}}}}'::jsonb,
                   1800, 1
            FROM generate_series(1, {HOSTS}) AS i
        """))
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
    next(urls, None)


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
    return {table for kind, table in found if kind == "Seq Scan"}


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
        ("taking a report (intake)", lambda s: take_pass(s, "web000007", _report("web000007"), history=True)),
    ],
)
def test_a_request_reads_through_an_index(fleet, name, run):
    assert whole(scans(fleet, lambda: run(fleet))) == set(), name


def test_what_reads_every_host_is_named(fleet):
    assert whole(scans(fleet, lambda: host_counts(fleet, 3.0, NOW))) == {"hosts"}, WHOLE["host_counts"]


def _recent(store: Any, host: str) -> Any:
    with store.connect() as conn:
        return recent(conn, HOST, host)


def _report(host: str) -> dict[str, Any]:
    return {"host": host, "state": "converged", "finishedAt": NOW.isoformat(), "intervalSeconds": 1800,
            "seq": 2, "passId": "p-plan", "resources": []}

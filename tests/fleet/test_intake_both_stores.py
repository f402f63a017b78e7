"""The same intakes on SQLite and on PostgreSQL leave the same rows (issue 39 item 5).

Taking a pass is four rules written once as SQLAlchemy Core (``datum.store.hosts``): the host row under the
sequence rule, the history row with its items under the keyframe rule, what the archive keeps beside it, and
the reboot lease on the host's return. PostgreSQL runs them as one statement, SQLite in turn. These tests run
one sequence of intakes on a real store of each and compare every row they wrote (the store's own clock
aside): a rule that one composition stopped running, or ran differently, shows as a difference.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datum.store import open_store
from datum.store.history import KEYFRAME
from datum.store.hosts import take_pass
from datum.store.leases import take
from datum.store.schema import (
    hosts,
    pass_events,
    pass_history,
    pass_reports,
    reboot_leases,
)

pytestmark = pytest.mark.postgres


def a_pass(host: str, seq: int | None, *, pass_id: str | None = None, state: str = "converged", boot: str | None = "b1",
           drifted: tuple[int, ...] = (), failed: tuple[int, ...] = (), minute: int = 0, incomplete: bool = False,
           health: dict[str, Any] | None = None, finished: bool = True) -> dict[str, Any]:
    """A pass report of three files, some drifted or failed, as ``datum agent`` posts it."""
    resources = []
    for n in range(3):
        s = "failed" if n in failed else "drifted" if n in drifted else "converged"
        resources.append({
            "id": f"File[/etc/app/{n}.conf]", "type": "File", "name": f"/etc/app/{n}.conf",
            "action": "change" if s != "converged" else "none", "state": s, "changed": s == "drifted",
            **({"reason": "content differs"} if s == "drifted" else {}), **({"error": "disk full"} if s == "failed" else {}),
        })
    report: dict[str, Any] = {
        "host": host, "mode": "enforce", "state": state, "startedAt": f"2026-12-01T10:{minute:02d}:00Z",
        "durationSeconds": 1.5, "exitCode": 0, "counts": {}, "resources": resources,
    }
    if finished:
        report["finishedAt"] = f"2026-12-01T10:{minute:02d}:01Z"
    if seq is not None:
        report["seq"] = seq
        report["passId"] = pass_id or f"{host}-{seq}"
    elif pass_id is not None:
        report["passId"] = pass_id
    if boot is not None:
        report["bootId"] = boot
    if state != "converged":
        report["reason"] = f"{state}: /etc/app"
    if incomplete:
        report["incomplete"] = True
    if health is not None:
        report["health"] = health
    return report


def intake(store: Any, host: str, report: dict[str, Any], group: str | None = None) -> str:
    """What the pass route does with a report (``datum.fleet.intake``): history, the lease freed on return."""
    return take_pass(store, host, report, history=True, release_lease=True, group=group).outcome


def rows(store: Any) -> dict[str, Any]:
    """Every row the intake writes, the store's clock aside: a history row's receipt is left out, a finish
    time that is its receipt reads ``"receipt"``, and rows refer to history rows by their rank."""
    with store.connect() as conn:
        history = conn.execute(sa.select(pass_history).order_by(pass_history.c.id)).mappings().all()
        rank = {r["id"]: n for n, r in enumerate(history)}

        def finish(r: Any, at: Any) -> Any:
            return "receipt" if r["finished_at"] == at else r["finished_at"]

        found = {
            "hosts": [
                {k: v for k, v in r.items() if k != "updated_at"}
                for r in conn.execute(sa.select(hosts).order_by(hosts.c.host)).mappings()
            ],
            "history": [
                {**{k: v for k, v in r.items() if k not in ("id", "at")}, "finished_at": finish(r, r["at"])}
                for r in history
            ],
            "reports": [  # last seen: the last history row of the digest received then (SQLite's clock is in ms)
                (r["digest"], r["host"], r["report"], max(n for n, h in enumerate(history)
                                                          if h["digest"] == r["digest"] and h["at"] == r["last_seen"]))
                for r in conn.execute(sa.select(pass_reports).order_by(pass_reports.c.digest)).mappings()
            ],
            "events": [
                {**{k: v for k, v in r.items() if k not in ("id", "pass_row", "received_at", "finished_at")},
                 "row": rank[r["pass_row"]], "finished_at": finish(r, r["received_at"])}
                for r in conn.execute(sa.select(pass_events).order_by(pass_events.c.id)).mappings()
            ],
            "leases": [
                (r["host"], r["group_name"], r["boot_id"], r["unhealthy"])
                for r in conn.execute(sa.select(reboot_leases).order_by(reboot_leases.c.host)).mappings()
            ],
        }
    return json.loads(json.dumps(found, default=str, sort_keys=True))  # JSON columns as parsed, times as text


@pytest.fixture
def stores(tmp_path, pg_database):
    both = [open_store(f"sqlite:///{tmp_path / 'datum.db'}"), open_store(pg_database)]
    yield both
    for s in both:
        s.dispose()


def lease(store: Any, host: str, boot: str) -> None:
    assert take(store, host, "web", boot, 5, timedelta(minutes=30)).granted


def sequence(store: Any) -> list[str]:
    """One of each thing the four rules decide, in an order that makes each matter."""
    out = []
    add = out.append
    add(intake(store, "web1", a_pass("web1", 1, drifted=(0,))))  # a new host
    add(intake(store, "web1", a_pass("web1", 2, drifted=(0,), minute=1)))  # newer, the same items: not stored again
    add(intake(store, "web1", a_pass("web1", 2, drifted=(0,), minute=1)))  # the same pass again
    add(intake(store, "web1", a_pass("web1", 1, pass_id="web1-1b", drifted=(0,))))  # older: in history only, flagged
    add(intake(store, "web1", a_pass("web1", 1, pass_id="web1-1b", drifted=(0,))))  # the same older pass again: once
    add(intake(store, "web1", a_pass("web1", 3, drifted=(0, 1), minute=2), group="db"))  # new items, a group
    add(intake(store, "web1", a_pass("web1", 4, state="failed", failed=(2,), minute=3)))  # a state change, events
    add(intake(store, "web1", a_pass("web1", 5, state="failed", failed=(2,), minute=3, incomplete=True)))  # saw nothing
    add(intake(store, "web1", a_pass("web1", None, pass_id="by-hand", minute=4, finished=False)))  # no seq, no finish
    add(intake(store, "web1", a_pass("web1", 6, drifted=(0,), minute=5)))  # the items of seq 1 and 2 again
    add(intake(store, "web1", a_pass("web1", 6, pass_id="web1-6b", minute=5)))  # the same seq: a duplicate
    # a reboot: same boot keeps the lease, another boot unhealthy marks it, another boot healthy frees it
    lease(store, "web2", "b1")
    add(intake(store, "web2", a_pass("web2", 1, boot="b1")))
    add(intake(store, "web2", a_pass("web2", 2, boot="b2", state="degraded",
                                     health={"ok": False, "detail": "health_check exited 1"})))
    add(intake(store, "web2", a_pass("web2", 3, boot=None)))  # no boot said: no lease touched
    add(intake(store, "web2", a_pass("web2", 4, boot="b2", minute=1)))
    lease(store, "web3", "b1")
    add(intake(store, "web3", a_pass("web3", 1, boot="b2", state="drifted", drifted=(1,))))  # back, not converged
    add(intake(store, "web3", a_pass("web3", 1, boot="b2", state="drifted", drifted=(1,))))  # duplicate: lease kept
    # the keyframe: the same items, pass after pass, are stored again every KEYFRAME rows
    for seq in range(1, KEYFRAME + 3):
        add(intake(store, "web4", a_pass("web4", seq, drifted=(1,), minute=seq % 60)))
    return out


def test_the_same_intakes_leave_the_same_rows_on_both_stores(stores):
    sqlite, postgresql = stores
    outcomes = sequence(sqlite)
    assert sequence(postgresql) == outcomes
    assert outcomes[:5] == ["stored", "stored", "duplicate", "older", "older"]
    assert outcomes.count("duplicate") == 3
    mine, theirs = rows(sqlite), rows(postgresql)
    for table in mine:
        assert theirs[table] == mine[table], table
    # and the rows are what the rules say, so that both stores being wrong alike fails too
    history = mine["history"]
    web1 = [h for h in history if h["name"] == "web1"]
    assert [(h["seq"], h["older"], h["items"] is not None) for h in web1] == [
        (1, False, True), (2, False, False), (1, True, False), (3, False, True), (4, False, True), (5, False, False),
        (None, False, True), (6, False, True),
    ]
    assert web1[6]["finished_at"] == "receipt"
    web4 = [h["items"] is not None for h in history if h["name"] == "web4"]
    assert web4 == [True] + [False] * (KEYFRAME - 1) + [True, False]
    assert mine["leases"] == [["web3", "web", "b1", "came back drifted: drifted: /etc/app"]]
    assert [e["resource"] for e in mine["events"] if e["state"] == "failed"] == ["File[/etc/app/2.conf]"] * 2
    assert [h["group_name"] for h in mine["hosts"]] == ["db", "default", "default", "default"]


# Random sequences: a few hosts, passes newer, older, again, from another boot, with or without items.
_passes = st.lists(
    st.tuples(
        st.sampled_from(["web1", "web2"]),
        st.one_of(st.none(), st.integers(1, 5)),
        st.sampled_from(["a", "b"]),  # which pass of that seq (its passId)
        st.sampled_from(["converged", "drifted", "failed"]),
        st.sampled_from([None, "b1", "b2"]),
        st.booleans(),  # incomplete
        st.sampled_from([None, "db"]),
        st.booleans(),  # take a lease in boot b1 first
    ),
    min_size=1, max_size=10,
)


def _empty(store: Any) -> None:
    with store.begin() as conn:
        for table in (pass_events, pass_reports, pass_history, reboot_leases, hosts):
            conn.execute(sa.delete(table))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(passes=_passes)
def test_any_sequence_of_intakes_leaves_the_same_rows_on_both_stores(stores, passes):
    results = []
    for store in stores:
        _empty(store)
        outcomes = []
        for host, seq, which, state, boot, incomplete, group, leased in passes:
            if leased:
                take(store, host, "web", "b1", 5, timedelta(minutes=30))
            drifted = (0,) if state == "drifted" else ()
            failed = (1,) if state == "failed" else ()
            report = a_pass(host, seq, pass_id=f"{host}-{seq}-{which}", state=state, boot=boot, drifted=drifted,
                            failed=failed, incomplete=incomplete, minute=seq or 0)
            outcomes.append(intake(store, host, report, group))
        results.append((outcomes, rows(store)))
    assert results[1] == results[0]


def test_the_intake_statement_is_short_enough_for_psycopg_to_parse_once():
    """psycopg converts a statement's placeholders again on every call once it is over its cached length (4 KiB):
    the intake's statement past it cost PostgreSQL's intake ~0.3 ms of CPU per report (measured 2026-12-07)."""
    from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH
    from sqlalchemy.dialects.postgresql import psycopg

    from datum.store.hosts import _at_once

    assert len(str(_at_once().compile(dialect=psycopg.dialect()))) <= MAX_CACHED_STATEMENT_LENGTH

"""Enrollment in the audit log with real processes on loopback (``datum serve``, ``datum enroll``, ``datum host``,
``datum agent enroll``, ``datum agent``), on SQLite and PostgreSQL: each act is one row with its principal (the
CLI's ``cli:<user>``, the enrolling host's ``join:<id>``, the host's own ``host:<name>`` for a session), a refused
enrollment one too, and no join token in any row. What each row holds, refusal by refusal, is
tests/api/test_audit_enroll.py's."""

from __future__ import annotations

import getpass

import sqlalchemy as sa

from datum.store import open_store
from datum.store.schema import audit_log

from .conftest import Fleet
from .test_enroll import admin, host


def rows(fleet: Fleet) -> list[dict]:  # type: ignore[type-arg]
    store = open_store(fleet.store_url)
    try:
        with store.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sa.select(audit_log).order_by(audit_log.c.id))]
    finally:
        store.dispose()


def acts(fleet: Fleet, before: int) -> list[tuple]:  # type: ignore[type-arg]
    """The rows written since ``before``, but the agents' pass reports: (principal, action, resource, outcome)."""
    return [(r["principal"], r["action"], r["resource"], r["outcome"]) for r in rows(fleet)[before:]
            if r["action"] != "fleet:ReportPass"]


def test_every_enrollment_act_leaves_one_row_with_its_principal(fleet: Fleet) -> None:
    me = f"cli:{getpass.getuser()}"
    n = len(rows(fleet))
    made = admin(fleet, "enroll", "create", "--host", "web1", "--server", fleet.url)
    assert made.code == 0, made.err
    join = made.out.strip().splitlines()[-1].split()[6]
    made_id = made.err.split("join token ")[1][:12]
    assert acts(fleet, n) == [(me, "enroll:CreateJoinToken", f'JoinToken::"{made_id}"', "allowed")]

    web1 = host(fleet, "web1")
    n = len(rows(fleet))
    assert web1.enroll(join).code == 0
    assert acts(fleet, n) == [(f"join:{made_id}", "enroll:Enroll", 'Host::"web1"', "allowed")]
    n = len(rows(fleet))
    assert web1.once().code in (0, 2)  # a session, then its pass report
    assert acts(fleet, n) == [("host:web1", "enroll:OpenSession", 'Host::"web1"', "allowed")]
    n = len(rows(fleet))
    again = host(fleet, "web1", "web1-again").enroll(join)  # its one use taken: refused, one row
    assert again.code == 65, again.err
    assert acts(fleet, n) == [(None, "enroll:Enroll", 'Host::"web1"', "unauthenticated")]

    n = len(rows(fleet))
    for command in (("enroll", "deny", "web1"), ("enroll", "approve", "web1"), ("host", "revoke", "web1"),
                    ("host", "forget", "web1")):
        done = admin(fleet, *command)
        assert done.code == 0, done.err
    assert acts(fleet, n) == [(me, "enroll:Deny", 'Host::"web1"', "allowed"),
                              (me, "enroll:Approve", 'Host::"web1"', "allowed"),
                              (me, "host:Revoke", 'Host::"web1"', "allowed"),
                              (me, "host:Forget", 'Host::"web1"', "allowed")]
    assert [r["request"] for r in rows(fleet)[n:]] == [
        "datum enroll deny web1", "datum enroll approve web1", "datum host revoke web1", "datum host forget web1"]
    n = len(rows(fleet))
    assert admin(fleet, "enroll", "approve", "web1").code != 0  # forgotten: nothing to approve, nothing recorded
    assert acts(fleet, n) == []

    dump = repr(rows(fleet))
    assert all(join[i:i + 20] not in dump for i in range(len(join) - 19))

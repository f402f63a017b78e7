"""Enrollment in the audit log (issue 37 item 4: every state-changing request, every refusal), on SQLite and
PostgreSQL through the app's front door on a real store: an enrollment and a session are one row each, written in
their change's transaction, with the principal the request proved (``join:<the join token's id>``, ``host:<name>``);
every refusal (401, 403, 409) one row with its answer; no join token, session token or proof in any row.

The CLI's acts (``datum enroll create|approve|deny``, ``datum host revoke|forget``) by real processes against a
real ``datum serve`` are tests/agent/test_enroll_audit.py's."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from datum.api.front.tokens import token_id
from datum.fleet import enroll as enrollment
from datum.store import audit
from datum.store.schema import audit_log, host_identities, join_tokens

from .story import Story, build_story
from .test_enroll_api import enroll, enroll_proof, session, session_proof


def rows(story: Story) -> list[dict]:  # type: ignore[type-arg]
    with story.store.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(sa.select(audit_log).order_by(audit_log.c.id))]


def one(story: Story, before: int) -> dict:  # type: ignore[type-arg]
    new = rows(story)[before:]
    assert len(new) == 1, [(r["action"], r["request"], r["status"], r["outcome"], r["detail"]) for r in new]
    return new[0]


def facts(row: dict) -> tuple:  # type: ignore[type-arg]
    return row["principal"], row["token"], row["action"], row["resource"], row["outcome"], row["status"]


def test_an_enrollment_and_a_session_are_one_row_each_with_whom_they_proved(tmp_path: Path, store_url: str) -> None:
    story = build_story(tmp_path, store=store_url)
    key = Ed25519PrivateKey.generate()
    join, made = enrollment.create_join(story.store, story.clock.now, host="web1")
    made_row = rows(story)[-1]  # the join token's making is the CLI's act: its row, with its id
    assert (made_row["action"], made_row["resource"]) == ("enroll:CreateJoinToken", f'JoinToken::"{made.id}"')
    assert made_row["principal"].startswith("cli:") and "host web1" in made_row["detail"]

    n = len(rows(story))
    done = enroll(story, key, "web1", join)
    assert done.status_code == 200 and done.json()["state"] == "active", done.text
    row = one(story, n)
    assert facts(row) == (f"join:{made.id}", made.id, "enroll:Enroll", 'Host::"web1"', "allowed", 200)
    assert row["request"] == "POST /v1/enroll" and row["source"] and row["policy"] is None
    assert row["detail"].startswith("active: approved by the join token")

    n = len(rows(story))
    opened = session(story, key, "web1")
    assert opened.status_code == 200, opened.text
    row = one(story, n)
    assert facts(row) == ("host:web1", None, "enroll:OpenSession", 'Host::"web1"', "allowed", 200)
    assert row["detail"].startswith(f"session {token_id(opened.json()['token'])} until ")

    n = len(rows(story))  # the same enrollment asked again (an answer lost): nothing more used, one row
    assert enroll(story, key, "web1", join).status_code == 200
    assert (one(story, n)["principal"], one(story, n)["detail"]) == (f"join:{made.id}", "asked again: active")


def test_every_refused_enrollment_and_session_is_one_row_with_its_answer(tmp_path: Path, store_url: str) -> None:
    story = build_story(tmp_path, store=store_url)
    key = Ed25519PrivateKey.generate()
    join, made = enrollment.create_join(story.store, story.clock.now, host="web1")
    assert enroll(story, key, "web1", join).status_code == 200

    n = len(rows(story))  # its one use taken: unauthenticated, no principal (as any 401)
    used = enroll(story, Ed25519PrivateKey.generate(), "web1", join)
    assert used.status_code == 401
    assert facts(one(story, n)) == (None, None, "enroll:Enroll", 'Host::"web1"', "unauthenticated", 401)

    n = len(rows(story))  # a pattern's token for a name it does not match: denied, its principal the token's
    pattern, by_pattern = enrollment.create_join(story.store, story.clock.now, pattern="web-*", uses=3)
    n = len(rows(story))
    wrong = enroll(story, Ed25519PrivateKey.generate(), "db-1", pattern)
    assert wrong.status_code == 403
    assert facts(one(story, n)) == (f"join:{by_pattern.id}", by_pattern.id, "enroll:Enroll", 'Host::"db-1"',
                                    "denied", 403)

    n = len(rows(story))  # a name another key holds: 409, nothing changed, its row with the answer
    replace, again = enrollment.create_join(story.store, story.clock.now, host="web1")
    n = len(rows(story))
    taken = enroll(story, Ed25519PrivateKey.generate(), "web1", replace)
    assert taken.status_code == 409
    assert facts(one(story, n))[:6] == (f"join:{again.id}", again.id, "enroll:Enroll", 'Host::"web1"', "allowed", 409)

    n = len(rows(story))  # a session signed by another key
    forged = session(story, Ed25519PrivateKey.generate(), "web1")
    assert forged.status_code == 401
    assert facts(one(story, n)) == (None, None, "enroll:OpenSession", 'Host::"web1"', "unauthenticated", 401)

    pend = Ed25519PrivateKey.generate()
    assert enroll(story, pend, "web-1", pattern).json()["state"] == "pending"
    n = len(rows(story))  # a pending host asks for a session: 403, its nonce spent, one row
    early = session(story, pend, "web-1")
    assert early.status_code == 403
    assert facts(one(story, n)) == ("host:web-1", None, "enroll:OpenSession", 'Host::"web-1"', "denied", 403)

    n = len(rows(story))  # no join token at all
    bare = story.client.post("/v1/enroll", json=enroll_proof(story, key, "web1", join))
    assert bare.status_code == 401
    assert facts(one(story, n)) == (None, None, "enroll:Enroll", 'Host::"web1"', "unauthenticated", 401)


def test_an_enrollment_is_never_stored_without_its_row(tmp_path: Path, store_url: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A row that cannot be written takes the enrollment with it: no identity, the join token's use not spent."""
    story = build_story(tmp_path, store=store_url)
    join, made = enrollment.create_join(story.store, story.clock.now, host="web1")
    n = len(rows(story))

    def broken(conn, entry):  # type: ignore[no-untyped-def]
        raise sa.exc.OperationalError("INSERT INTO audit_log", {}, Exception("the disk is full"))

    monkeypatch.setattr(audit, "record", broken)
    failed = enroll(story, Ed25519PrivateKey.generate(), "web1", join)
    assert failed.status_code in (500, 503), failed.text
    with story.store.connect() as conn:
        assert conn.execute(sa.select(host_identities.c.host)).first() is None
        assert conn.execute(sa.select(join_tokens.c.used)).scalar() == 0
    assert one(story, n)["status"] == failed.status_code  # the request's one row: its answer's, written with it


def test_no_join_token_session_token_or_proof_is_ever_in_the_audit_log(tmp_path: Path, store_url: str) -> None:
    story = build_story(tmp_path, store=store_url)
    key = Ed25519PrivateKey.generate()
    join, _ = enrollment.create_join(story.store, story.clock.now, host="web1")
    proof = enroll_proof(story, key, "web1", join)
    assert story.client.post("/v1/enroll", json=proof, headers={"Authorization": f"Bearer {join}"}).status_code == 200
    asked = session_proof(story, key, "web1")
    opened = story.client.post("/v1/enroll/session", json=asked)
    assert opened.status_code == 200
    bearer = opened.json()["token"]
    assert story.client.post("/v1/enroll/session", json=asked).status_code == 401  # the proof sent again
    assert story.client.post(f"/v1/enroll?{join}", json=enroll_proof(story, key, "web1", join),  # pasted in a query
                             headers={"Authorization": f"Bearer {join}"}).status_code == 200
    dump = repr(rows(story))
    assert token_id(join) in dump and token_id(bearer) in dump  # named by their ids...
    for secret in (join, bearer, proof["signature"], asked["signature"]):
        assert secret not in dump  # ...never themselves, nor any 20 characters of them
        assert all(secret[i:i + 20] not in dump for i in range(len(secret) - 19))


def test_the_approval_hooks_decision_is_one_row_in_its_transaction_and_no_answer_is_none(
        tmp_path: Path, store_url: str) -> None:
    """The hook decides off any request (``datum.fleet.approvals.Asker``): its approval and its denial each leave
    one row, principal ``hook:<its path>``, the action a person's ``datum enroll approve|deny`` has; a hook that
    does not answer in time decides nothing and leaves none."""
    from datetime import timedelta

    from datum.fleet.approvals import Asker

    story = build_story(tmp_path, store=store_url)
    pattern, _made = enrollment.create_join(story.store, story.clock.now, pattern="web-*", uses=3)
    for name in ("web-1", "web-2", "web-3"):
        assert enroll(story, Ed25519PrivateKey.generate(), name, pattern).json()["state"] == "pending"
    hooks = {}
    for name, body in (("yes", "exit 0"), ("no", "echo 'not in the inventory'; exit 3"), ("slow", "sleep 30")):
        hooks[name] = tmp_path / f"approve-{name}"
        hooks[name].write_text(f"#!/bin/sh\ncat >/dev/null\n{body}\n")
        hooks[name].chmod(0o755)
    for host, hook in (("web-1", "yes"), ("web-2", "no"), ("web-3", "slow")):
        with story.store.begin() as conn:  # this one due now, the others not
            conn.execute(sa.update(host_identities).values(hook_due=sa.case(
                (host_identities.c.host == host, story.clock.now), else_=story.clock.now + timedelta(days=1))))
        n = len(rows(story))
        asker = Asker(story.store, hooks[hook], timedelta(seconds=1), lambda: story.clock.now)
        asker.poll()
        asker.close()
        with story.store.connect() as conn:
            state = conn.execute(sa.select(host_identities.c.state).where(host_identities.c.host == host)).scalar()
        if hook == "slow":
            assert state == "pending" and rows(story)[n:] == []
            continue
        row = one(story, n)
        action = "enroll:Approve" if hook == "yes" else "enroll:Deny"
        assert facts(row) == (f"hook:{hooks[hook]}", None, action, f'Host::"{host}"', "allowed", None)
        assert row["detail"].startswith(f"{state}: ") and row["request"] == f"[enroll] approve {hooks[hook]}"
    assert "not in the inventory" in one(story, len(rows(story)) - 1)["detail"]

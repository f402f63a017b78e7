"""Enrollment over HTTP with the server's clock injected (``create_app(clock=...)``): a join token's life and
uses, a host's clock far off, a nonce too old, a session's end, and ``[server] require_enrolled_agents``.

The processes (``datum serve``, ``datum enroll``, ``datum agent enroll``) are tests/agent/test_enroll.py's.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from datum.core.findings import Problem
from datum.fleet import enroll as enrollment
from datum.identity import b64, signed
from datum.store import nonces
from datum.store.tokens import ID_LENGTH, digest

from .story import Story, build_story, serve_fleet


def _public(key: Ed25519PrivateKey) -> str:
    return b64(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))


def _nonce(story: Story) -> str:
    answer = story.client.get("/v1/enroll/nonce")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["nonce"])


def enroll_proof(story: Story, key: Ed25519PrivateKey, host: str, join: str, *, skew: float = 0,
                 nonce: str | None = None) -> dict[str, Any]:
    nonce = nonce or _nonce(story)
    when = int(story.clock.now.timestamp() + skew)
    public = _public(key)
    signature = key.sign(signed("enroll", nonce, host, when, digest(join)[:ID_LENGTH], public))
    return {"host": host, "publicKey": public, "nonce": nonce, "time": when, "signature": b64(signature),
            "facts": {"os": "testos"}}


def enroll(story: Story, key: Ed25519PrivateKey, host: str, join: str, *, skew: float = 0, nonce: str | None = None) -> Any:
    body = enroll_proof(story, key, host, join, skew=skew, nonce=nonce)
    return story.client.post("/v1/enroll", json=body, headers={"Authorization": f"Bearer {join}"})


def session_proof(story: Story, key: Ed25519PrivateKey, host: str, *, skew: float = 0) -> dict[str, Any]:
    nonce = _nonce(story)
    when = int(story.clock.now.timestamp() + skew)
    return {"host": host, "nonce": nonce, "time": when, "signature": b64(key.sign(signed("session", nonce, host, when)))}


def session(story: Story, key: Ed25519PrivateKey, host: str, *, skew: float = 0) -> Any:
    return story.client.post("/v1/enroll/session", json=session_proof(story, key, host, skew=skew))


def _message(answer: Any) -> str:
    return str(answer.json()["issues"][0]["message"])


def test_a_join_token_ends_at_its_ttl_on_the_servers_clock(tmp_path: Path) -> None:
    story = build_story(tmp_path)
    join, made = enrollment.create_join(story.store, story.clock.now, host="web1", ttl=timedelta(hours=1))
    story.clock.now += timedelta(minutes=61)
    late = enroll(story, Ed25519PrivateKey.generate(), "web1", join)
    assert late.status_code == 401 and f"the join token {made.id} ended at" in _message(late)
    join, _ = enrollment.create_join(story.store, story.clock.now, host="web1", ttl=timedelta(hours=1))
    story.clock.now += timedelta(minutes=59)
    in_time = enroll(story, Ed25519PrivateKey.generate(), "web1", join)
    assert in_time.status_code == 200 and in_time.json()["state"] == "active", in_time.text


def test_a_pattern_token_takes_its_uses_and_names_that_match_only(tmp_path: Path) -> None:
    story = build_story(tmp_path)
    join, made = enrollment.create_join(story.store, story.clock.now, pattern="web-*", uses=2)
    wrong = enroll(story, Ed25519PrivateKey.generate(), "db-1", join)
    assert wrong.status_code == 403 and "does not match the join token's pattern 'web-*'" in _message(wrong)
    for name in ("web-1", "web-2"):
        done = enroll(story, Ed25519PrivateKey.generate(), name, join)
        assert done.status_code == 200 and done.json()["state"] == "pending", done.text
        assert f"datum enroll approve {name}" in done.json()["reason"]
    third = enroll(story, Ed25519PrivateKey.generate(), "web-3", join)
    assert third.status_code == 401 and f"the join token {made.id} has been used (2 of 2 uses)" in _message(third)


def test_a_host_clock_more_than_five_minutes_off_is_refused_naming_the_offset(tmp_path: Path) -> None:
    story = build_story(tmp_path)
    key = Ed25519PrivateKey.generate()
    join, _ = enrollment.create_join(story.store, story.clock.now, host="web1")
    ahead = enroll(story, key, "web1", join, skew=7 * 60 + 3)
    assert ahead.status_code == 401
    assert "this host's clock is 7 min 3 s ahead of the server's (+423 s" in _message(ahead)
    assert enroll(story, key, "web1", join, skew=4 * 60).status_code == 200  # within 5 min: taken
    behind = session(story, key, "web1", skew=-(2 * 3600 + 5))
    assert behind.status_code == 401 and "2 h 5 s behind the server's" in _message(behind)
    assert session(story, key, "web1", skew=-60).status_code == 200


def test_a_nonce_is_good_for_two_minutes_and_only_from_this_store(tmp_path: Path) -> None:
    story = build_story(tmp_path)
    key = Ed25519PrivateKey.generate()
    join, _ = enrollment.create_join(story.store, story.clock.now, host="web1")
    old = _nonce(story)
    story.clock.now += timedelta(seconds=enrollment.NONCE_LIFE + 1)
    stale = enroll(story, key, "web1", join, nonce=old)
    assert stale.status_code == 401 and "ask for another" in _message(stale)
    forged = old.rsplit(".", 1)[0] + ".0123456789abcdef0123456789abcdef"
    assert enroll(story, key, "web1", join, nonce=forged).status_code == 401
    assert enroll(story, key, "web1", join).status_code == 200


def test_a_signature_by_another_key_gets_no_session(tmp_path: Path) -> None:
    story = build_story(tmp_path)
    key = Ed25519PrivateKey.generate()
    join, _ = enrollment.create_join(story.store, story.clock.now, host="web1")
    assert enroll(story, key, "web1", join).status_code == 200
    other = session(story, Ed25519PrivateKey.generate(), "web1")
    assert other.status_code == 401 and "does not verify with the key host web1 enrolled with" in _message(other)
    never = session(story, key, "web2")
    assert never.status_code == 401 and "host web2 has not enrolled" in _message(never)


def test_a_session_is_bound_to_its_host_and_ends_with_its_life(tmp_path: Path) -> None:
    story = build_story(tmp_path)
    serve_fleet(story, tmp_path / "fleet")
    key = Ed25519PrivateKey.generate()
    join, _ = enrollment.create_join(story.store, story.clock.now, host="web1")
    assert enroll(story, key, "web1", join).status_code == 200
    got = session(story, key, "web1")
    assert got.status_code == 200 and got.json()["ttlSeconds"] == 3600
    bearer = {"Authorization": f"Bearer {got.json()['token']}"}
    assert story.client.get("/v1/hosts/web1/manifest", headers=bearer).status_code == 200
    assert story.client.get("/v1/hosts/web2/manifest", headers=bearer).status_code == 403  # its own host only
    from datum.api.front.tokens import listed

    assert [t for t in listed(story.store) if t["host"] == "web1"] == []  # datum token list shows no session
    story.clock.now += timedelta(hours=1, seconds=1)
    story.app.state.datum.tokens.revalidate()  # the server's 2 s re-check, run now
    ended = story.client.get("/v1/hosts/web1/manifest", headers=bearer)
    assert ended.status_code == 401 and "the session has ended" in _message(ended)
    again = session(story, key, "web1")  # a week, or an hour, later: the key gives another
    assert again.status_code == 200
    assert story.client.get("/v1/hosts/web1/manifest", headers={"Authorization": f"Bearer {again.json()['token']}"}).status_code == 200


def test_require_enrolled_agents_refuses_agent_tokens_that_are_not_sessions(tmp_path: Path) -> None:
    from datum.api.front.tokens import create

    story = build_story(tmp_path, require_enrolled_agents=True)
    serve_fleet(story, tmp_path / "fleet")
    bound = create(story.store, "agent", "web1")
    refused = story.client.get("/v1/hosts/web1/manifest", headers={"Authorization": f"Bearer {bound}"})
    assert refused.status_code == 401 and "require_enrolled_agents" in _message(refused)
    assert story.get("/v1/hosts").status_code == 200  # a person's token is not an agent's
    key = Ed25519PrivateKey.generate()
    join, _ = enrollment.create_join(story.store, story.clock.now, host="web1")
    assert enroll(story, key, "web1", join).status_code == 200
    token = session(story, key, "web1").json()["token"]
    assert story.client.get("/v1/hosts/web1/manifest", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_without_require_enrolled_agents_a_bound_token_keeps_working(tmp_path: Path) -> None:
    from datum.api.front.tokens import create

    story = build_story(tmp_path)
    serve_fleet(story, tmp_path / "fleet")
    bound = create(story.store, "agent", "web1")
    assert story.client.get("/v1/hosts/web1/manifest", headers={"Authorization": f"Bearer {bound}"}).status_code == 200


def test_deny_ends_an_active_hosts_sessions_and_approve_lets_it_have_them_again(tmp_path: Path) -> None:
    story = build_story(tmp_path)
    serve_fleet(story, tmp_path / "fleet")
    key = Ed25519PrivateKey.generate()
    join, _ = enrollment.create_join(story.store, story.clock.now, host="web1")
    assert enroll(story, key, "web1", join).status_code == 200
    bearer = {"Authorization": f"Bearer {session(story, key, 'web1').json()['token']}"}
    assert story.client.get("/v1/hosts/web1/manifest", headers=bearer).status_code == 200
    denied, ended = enrollment.deny(story.store, "web1", story.clock.now)
    assert (denied.state, ended) == ("denied", 1)
    story.app.state.datum.tokens.revalidate()
    assert story.client.get("/v1/hosts/web1/manifest", headers=bearer).status_code == 401
    refused = session(story, key, "web1")
    assert refused.status_code == 403 and "host web1 is denied: denied by datum enroll deny" in _message(refused)
    assert enrollment.approve(story.store, "web1", story.clock.now).state == "active"
    assert session(story, key, "web1").status_code == 200
    revoked, _ = enrollment.revoke(story.store, "web1", story.clock.now)
    assert revoked.state == "revoked"
    with pytest.raises(Problem) as raised:
        enrollment.approve(story.store, "web1", story.clock.now)
    assert "datum host forget web1" in raised.value.findings[0].message


def test_a_captured_proof_sent_again_is_refused_by_every_replica(tmp_path: Path, store_url: str) -> None:
    """A proof (an enrollment's, a session's) is good for one request: sent again within the nonce's two minutes,
    to the server that took it or to another replica of the store, it is 401, and gives no session."""
    one, two = (build_story(tmp_path / name, store=store_url) for name in ("one", "two"))
    key = Ed25519PrivateKey.generate()
    join, _ = enrollment.create_join(one.store, one.clock.now, host="web1")
    joined = {"Authorization": f"Bearer {join}"}
    proof = enroll_proof(one, key, "web1", join)
    assert one.client.post("/v1/enroll", json=proof, headers=joined).status_code == 200
    for story in (one, two):
        again = story.client.post("/v1/enroll", json=proof, headers=joined)
        assert again.status_code == 401 and "the nonce was used already" in _message(again), again.text
    captured = session_proof(one, key, "web1")
    first = two.client.post("/v1/enroll/session", json=captured)
    assert first.status_code == 200, first.text
    for story in (two, one):
        replayed = story.client.post("/v1/enroll/session", json=captured)
        assert replayed.status_code == 401 and "the nonce was used already" in _message(replayed), replayed.text
        assert "token" not in replayed.json()
    assert session(one, key, "web1").status_code == 200  # a fresh nonce: a session, as always


def test_of_one_proof_sent_to_two_replicas_at_once_exactly_one_has_a_session(tmp_path: Path, store_url: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    one, two = (build_story(tmp_path / name, store=store_url) for name in ("one", "two"))
    key = Ed25519PrivateKey.generate()
    join, _ = enrollment.create_join(one.store, one.clock.now, host="web1")
    assert enroll(one, key, "web1", join).status_code == 200
    for _ in range(5):
        captured = session_proof(one, key, "web1")
        with ThreadPoolExecutor(4) as pool:
            sent = [pool.submit(story.client.post, "/v1/enroll/session", json=captured) for story in (one, two, one, two)]
            codes = sorted(s.result().status_code for s in sent)
        assert codes == [200, 401, 401, 401]


def test_a_session_renewal_is_one_write_transaction_that_takes_its_nonce(
    tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The proof's nonce is taken in the session's own transaction (``datum.store.nonces.take``): one commit per
    renewal, and a proof whose session was not stored (the host revoked meanwhile) is spent all the same."""
    from sqlalchemy import event

    story = build_story(tmp_path, store=store_url)
    key = Ed25519PrivateKey.generate()
    join, _ = enrollment.create_join(story.store, story.clock.now, host="web1")
    assert enroll(story, key, "web1", join).status_code == 200
    commits: list[object] = []

    def committed(conn: object) -> None:
        commits.append(conn)

    proof = session_proof(story, key, "web1")  # the nonce asked for before counting
    event.listen(story.store.engine, "commit", committed)
    try:
        first = story.client.post("/v1/enroll/session", json=proof)
    finally:
        event.remove(story.store.engine, "commit", committed)
    assert first.status_code == 200, first.text
    assert len(commits) == 1
    again = story.client.post("/v1/enroll/session", json=proof)
    assert again.status_code == 401 and "the nonce was used already" in _message(again)
    # revoked between the look at the host and the session's transaction: no session, the nonce spent
    proof = session_proof(story, key, "web1")
    real = enrollment.identity_or_none

    def looked_before_the_revocation(store: Any, host: str) -> Any:
        held = real(store, host)
        enrollment.revoke(store, host, story.clock.now)
        return held

    monkeypatch.setattr(enrollment, "identity_or_none", looked_before_the_revocation)
    late = story.client.post("/v1/enroll/session", json=proof)
    assert late.status_code == 403 and "host web1 is no longer active" in _message(late), late.text
    assert not nonces.spend(story.store, proof["nonce"], story.clock.now + timedelta(minutes=10))  # taken already


def test_spent_nonces_are_kept_past_their_life_then_purged(tmp_path: Path) -> None:
    story = build_story(tmp_path)
    key = Ed25519PrivateKey.generate()
    join, _ = enrollment.create_join(story.store, story.clock.now, host="web1")
    assert enroll(story, key, "web1", join).status_code == 200
    life = enrollment.NONCE_LIFE + enrollment.NONCE_KEPT
    assert nonces.purge(story.store, story.clock.now + timedelta(seconds=life - 2)) == 0
    assert nonces.purge(story.store, story.clock.now + timedelta(seconds=life + 1)) == 1


def test_a_server_holds_enrolled_labels_in_memory_and_reads_what_changed(tmp_path: Path) -> None:
    """``datum.fleet.labels``: the labels of active identities only, read whole at first; an approval and a revoke
    seen at the next refresh (identities changed lately), a forget at the next whole read."""
    from datum.fleet.labels import WHOLE, EnrolledLabels

    story = build_story(tmp_path)
    now = [0.0]
    labels = EnrolledLabels(lambda: story.store, clock=lambda: now[0])
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    join, _ = enrollment.create_join(story.store, story.clock.now, pattern="db-*", uses=2, labels={"role": "db"})
    assert enroll(story, key, "db-1", join).json()["state"] == "pending"
    assert enroll(story, other, "db-2", join).status_code == 200
    assert labels.of("db-1") == {} and labels.remembered("db-1") == {}  # pending: not yet the server's word
    enrollment.approve(story.store, "db-1", story.clock.now)
    assert labels.remembered("db-1") == {}  # memory only: read at the next refresh
    labels.refresh()
    assert labels.of("db-1") == {"role": "db"} and labels.of("db-2") == {}
    enrollment.revoke(story.store, "db-1", story.clock.now)
    labels.refresh()
    assert labels.of("db-1") == {}
    enrollment.forget(story.store, "db-1")
    assert enroll(story, key, "db-1", enrollment.create_join(story.store, story.clock.now, host="db-1",
                                                              labels={"role": "web"})[0]).status_code == 200
    labels.refresh()
    assert labels.of("db-1") == {"role": "web"}
    enrollment.forget(story.store, "db-1")
    labels.refresh()
    assert labels.of("db-1") == {"role": "web"}  # a delete is not a change: seen at the whole read
    now[0] += WHOLE
    labels.refresh()
    assert labels.of("db-1") == {}

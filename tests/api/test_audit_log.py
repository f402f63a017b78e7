"""The audit log (issue 37 item 4), on SQLite and PostgreSQL through the in-process app on a real store: every acting
route leaves exactly one row with its principal, outcome and status; every refusal (401, 403) one; the row is
written in the change's transaction (no change without it); no token in it; GET /v1/audit is the admin's, paged
and filtered; the chain verifies, breaks at an edited row, and survives pruning."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from datum.api.front.tokens import create as create_token
from datum.api.front.tokens import token_id
from datum.store import audit, auditchain
from datum.store.schema import audit_chain, audit_log, hosts

from .story import Story, pass_report
from .test_rollouts import fleet_story, start


@pytest.fixture
def story(tmp_path, store_url):  # type: ignore[no-untyped-def]
    s = fleet_story(tmp_path, store_url)
    s.tokens["web1"] = create_token(s.store, "agent", host="web1")
    yield s
    s.client.close()
    s.store.dispose()


def bound(story: Story, host: str) -> dict[str, str]:
    """The headers of an agent token bound to ``host`` (made once)."""
    if host not in story.tokens:
        story.tokens[host] = create_token(story.store, "agent", host=host)
    return story.auth(host)


def rows(story: Story) -> list[dict]:  # type: ignore[type-arg]
    """Every row, oldest first (the CLI's token rows of the story's set-up included)."""
    with story.store.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(sa.select(audit_log).order_by(audit_log.c.seq))]


def after(story: Story, before: int) -> list[dict]:  # type: ignore[type-arg]
    return rows(story)[before:]


def one(story: Story, before: int) -> dict:  # type: ignore[type-arg]
    new = after(story, before)
    assert len(new) == 1, [(r["seq"], r["request"], r["status"], r["outcome"], r["detail"]) for r in new]
    return new[0]


def test_every_acting_route_leaves_one_row_with_its_principal_outcome_and_status(story):
    n = len(rows(story))
    web1 = token_id(story.tokens["web1"])
    report = pass_report("web1") | {"passId": "p1", "seq": 1}
    posted = story.client.post("/v1/hosts/web1/passes", json=report, headers=story.auth("web1"))
    assert posted.status_code == 201, posted.text
    row = one(story, n)
    assert (row["principal"], row["token"], row["action"], row["resource"], row["outcome"], row["status"]) == (
        "agent@host:web1", web1, "fleet:ReportPass", 'Host::"web1"', "allowed", 201)
    assert row["request"] == "POST /v1/hosts/web1/passes" and row["source"] and row["policy"]

    n = len(rows(story))  # the same pass again: nothing stored, still one row, with its answer
    again = story.client.post("/v1/hosts/web1/passes", json=report, headers=story.auth("web1"))
    assert again.status_code == 200 and again.headers["datum-pass"] == "duplicate"
    assert (one(story, n)["status"], one(story, n)["outcome"]) == (200, "allowed")

    n = len(rows(story))
    taken = story.client.post("/v1/hosts/web1/reboot-lease", json={"bootId": "b1"}, headers=story.auth("web1"))
    assert taken.status_code == 200 and taken.json()["granted"], taken.text
    row = one(story, n)
    assert (row["action"], row["status"], row["principal"]) == ("fleet:TakeRebootLease", 200, "agent@host:web1")

    n = len(rows(story))
    back = story.client.delete("/v1/hosts/web1/reboot-lease?bootId=b1", headers=story.auth("web1"))
    assert back.status_code == 204
    row = one(story, n)
    assert (row["request"], row["status"]) == ("DELETE /v1/hosts/web1/reboot-lease", 204)

    n = len(rows(story))  # a plugin's write: the buckets reconciler's, through the SDK
    put = story.client.put("/v1/buckets/photos", headers=story.auth("admin"))
    assert put.status_code == 201, put.text
    row = one(story, n)
    assert (row["principal"], row["action"], row["resource"], row["status"]) == (
        "admin", "buckets:Write", 'Bucket::"photos"', 201)
    n = len(rows(story))
    assert story.client.put("/v1/buckets/photos", headers=story.auth("admin")).status_code == 200  # already asked
    assert one(story, n)["status"] == 200
    n = len(rows(story))
    assert story.client.delete("/v1/buckets/nothing", headers=story.auth("admin")).status_code == 404
    assert (one(story, n)["status"], one(story, n)["outcome"]) == (404, "allowed")


def test_a_rollout_command_leaves_one_row_with_the_change_and_one_when_refused(story):
    start(story, ["web1", "web2"])
    n = len(rows(story))
    paused = story.client.post("/v1/rollouts/current/pause", headers=story.auth("operator"))
    assert paused.status_code == 200, paused.text
    row = one(story, n)
    assert (row["principal"], row["action"], row["resource"], row["status"], row["outcome"]) == (
        "operator", "fleet:ManageRollout", 'Server::"datum"', 200, "allowed")
    n = len(rows(story))
    again = story.client.post("/v1/rollouts/current/pause", headers=story.auth("operator"))
    assert again.status_code == 409  # paused already: no change, one row with the answer
    assert (one(story, n)["status"], one(story, n)["outcome"]) == (409, "allowed")
    n = len(rows(story))
    refused = story.client.post("/v1/rollouts/current/abort", headers=story.auth("viewer"))
    assert refused.status_code == 403
    row = one(story, n)
    assert (row["principal"], row["action"], row["outcome"], row["status"], row["policy"]) == (
        "viewer", "fleet:ManageRollout", "denied", 403, None)


def test_every_refusal_leaves_one_row(story):
    n = len(rows(story))
    assert story.client.get("/v1/hosts").status_code == 401  # no token
    row = one(story, n)
    assert (row["principal"], row["token"], row["outcome"], row["status"], row["action"]) == (
        None, None, "unauthenticated", 401, "fleet:ReadHost")
    n = len(rows(story))
    unknown = "datum_" + "x" * 43
    assert story.client.post("/v1/hosts/web1/passes", json=pass_report("web1"),
                             headers={"Authorization": f"Bearer {unknown}"}).status_code == 401
    row = one(story, n)
    assert (row["principal"], row["token"], row["outcome"]) == (None, None, "unauthenticated")
    n = len(rows(story))  # a bound agent on another host
    assert story.client.post("/v1/hosts/web2/passes", json=pass_report("web2"), headers=story.auth("web1")).status_code == 403
    row = one(story, n)
    assert (row["principal"], row["resource"], row["outcome"], row["status"]) == (
        "agent@host:web1", 'Host::"web2"', "denied", 403)
    n = len(rows(story))  # a read refused is recorded; a read allowed is not
    assert story.client.get("/v1/hosts", headers=story.auth("stranger")).status_code == 403
    assert one(story, n)["outcome"] == "denied"
    n = len(rows(story))
    assert story.get("/v1/hosts").status_code == 200
    assert after(story, n) == []


def test_the_row_is_written_in_the_changes_transaction(story):
    """A row that cannot be written (its seq taken by hand) takes the change with it: the pass is not stored."""
    with story.store.begin() as conn:
        head = conn.execute(sa.select(audit_chain.c.seq).where(audit_chain.c.name == "head")).scalar_one()
        conn.execute(sa.insert(audit_log).values(seq=head + 1, at=datetime.now(UTC), outcome="allowed", prev="x",
                                                 hash="y"))
    posted = story.client.post("/v1/hosts/web1/passes", json=pass_report("web1"), headers=story.auth("web1"))
    assert posted.status_code == 500
    with story.store.connect() as conn:
        assert conn.execute(sa.select(hosts.c.host).where(hosts.c.host == "web1")).first() is None


def test_no_token_is_ever_in_the_audit_log(story):
    secret = create_token(story.store, "operator")
    headers = {"Authorization": f"Bearer {secret}"}
    story.client.post("/v1/rollouts/current/pause", headers=headers)
    story.client.get(f"/v1/hosts/{secret}", headers=headers)  # pasted in a path by mistake
    story.client.post(f"/v1/hosts/{secret}/passes", json=pass_report("web1"), headers=headers)
    story.client.get("/v1/audit", headers=headers)
    dump = repr(rows(story))
    assert token_id(secret) in dump  # named by its id...
    for token in [secret, *story.tokens.values()]:
        assert token not in dump  # ...never itself
        assert token[len("datum_"):][:20] not in dump


def test_get_audit_is_the_admins_paged_and_filtered(story):
    for _ in range(3):
        story.client.post("/v1/rollouts/current/pause", headers=story.auth("operator"))  # 404: no rollout
    refused = story.get("/v1/audit")
    assert refused.status_code == 403 and refused.json()["issues"][0]["action"] == "fleet:ReadAudit"
    assert story.get("/v1/audit", "viewer").status_code == 403
    page = story.get("/v1/audit?limit=2&principal=operator", "admin")
    assert page.status_code == 200, page.text
    doc = page.json()
    assert [e["principal"] for e in doc["entries"]] == ["operator", "operator"]
    assert doc["entries"][0]["seq"] > doc["entries"][1]["seq"]  # newest first
    assert doc["entries"][0]["action"] == "fleet:ReadAudit" and doc["entries"][0]["outcome"] == "denied"
    rest = story.get(f"/v1/audit?limit=2&principal=operator&cursor={doc['next']}", "admin").json()
    assert [e["seq"] for e in rest["entries"]] == [doc["entries"][1]["seq"] - 1, doc["entries"][1]["seq"] - 2]
    made = story.get("/v1/audit?action=token:Create", "admin").json()["entries"]
    assert made and {e["principal"] for e in made} == {audit.local_principal()}
    assert "tokenId" not in made[0] and made[0]["detail"].startswith("principal ")
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat().replace("+00:00", "Z")
    assert story.get(f"/v1/audit?since={future}", "admin").json() == {"entries": []}
    bad = story.get("/v1/audit?since=yesterday&cursor=x", "admin")
    assert bad.status_code == 422 and {f["field"] for f in bad.json()["issues"][0]["fields"]} == {"since", "cursor"}


def test_the_chain_verifies_breaks_at_an_edited_row_and_survives_pruning(story):
    for host in ("web1", "web2"):
        story.client.post(f"/v1/hosts/{host}/passes", json=pass_report(host), headers=bound(story, host))
    found = auditchain.verify(story.store)
    assert found.whole and found.rows == len(rows(story)) and found.head.seq == found.rows
    with story.store.begin() as conn:
        conn.execute(sa.update(audit_log).where(audit_log.c.seq == 3).values(principal="someone"))
    broken = auditchain.verify(story.store)
    assert (broken.whole, broken.broken) == (False, 3) and "changed" in (broken.why or "")
    with story.store.begin() as conn:  # its hash made again: the next row names another
        row = conn.execute(sa.select(audit_log).where(audit_log.c.seq == 3)).one()
        values = {c: getattr(row, c) for c in ("principal", "action", "resource", "outcome", "status", "token", "source",
                                               "request", "policy", "detail")}
        conn.execute(sa.update(audit_log).where(audit_log.c.seq == 3).values(
            hash=audit.digest(3, row.at, values, row.prev)))
    assert auditchain.verify(story.store).broken == 4
    with story.store.begin() as conn:
        conn.execute(sa.delete(audit_log).where(audit_log.c.seq >= 3))
    cut = auditchain.verify(story.store)
    assert cut.broken == 3 and "missing" in (cut.why or "")


def test_pruning_keeps_the_chain_verifiable(story):
    story.client.post("/v1/hosts/web1/passes", json=pass_report("web1"), headers=bound(story, "web1"))
    old = len(rows(story))
    time.sleep(0.02)
    cut = datetime.now(UTC)
    time.sleep(0.02)
    for host in ("web2", "web3"):
        story.client.post(f"/v1/hosts/{host}/passes", json=pass_report(host), headers=bound(story, host))
    written = len(rows(story))
    assert auditchain.prune(story.store, cut, batch=2) == old
    kept = auditchain.verify(story.store)
    assert kept.whole and kept.anchor.seq == old and kept.rows == written - old, kept
    assert rows(story)[0]["seq"] == old + 1
    story.client.post("/v1/hosts/web4/passes", json=pass_report("web4"), headers=bound(story, "web4"))
    assert auditchain.verify(story.store).whole
    with story.store.begin() as conn:  # the oldest row kept deleted by hand: not pruning, a gap after the anchor
        conn.execute(sa.delete(audit_log).where(audit_log.c.seq == old + 1))
    assert auditchain.verify(story.store).broken == old + 1


def test_two_servers_on_one_store_write_one_chain(store_url):
    """Two engines on one database (two replicas' pools), eight writers each at once: one line, no fork, no gap."""
    import threading

    from datum.store import open_store

    stores = [open_store(store_url), open_store(store_url)]
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(15):
                auditchain.write(stores[n % 2], audit.Entry(f"replica{n % 2}", "fleet:ReportPass", f'Host::"h{n}-{i}"'))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        found = auditchain.verify(stores[1])
        assert found.whole and found.rows == 120 and found.head.seq == 120, found
    finally:
        for s in stores:
            s.dispose()

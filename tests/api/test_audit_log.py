"""The audit log (issue 37 item 4), on SQLite and PostgreSQL through the in-process app on a real store: every acting
route leaves exactly one row with its principal, outcome and status, a pass report's written with the pass; every
refusal (401, 403) one; the row is written in the change's transaction (no change without it); no token in it;
GET /v1/audit is the admin's, paged and filtered, rows not sealed yet among them; the rows are sealed into the
chain after their commit (by any store, a row left unsealed by a process that died included); the chain verifies,
breaks at an edited row, and survives pruning."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from datum.api.front.tokens import create as create_token
from datum.api.front.tokens import token_id
from datum.store import audit, auditchain
from datum.store.schema import audit_log, reboot_leases

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
    """Every row, oldest first, sealed or not (the CLI's token rows of the story's set-up included)."""
    with story.store.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(sa.select(audit_log).order_by(audit_log.c.id))]


def after(story: Story, before: int) -> list[dict]:  # type: ignore[type-arg]
    return rows(story)[before:]


def one(story: Story, before: int) -> dict:  # type: ignore[type-arg]
    new = after(story, before)
    assert len(new) == 1, [(r["seq"], r["request"], r["status"], r["outcome"], r["detail"]) for r in new]
    return new[0]


def test_every_acting_route_leaves_one_row_with_its_principal_outcome_and_status(story):
    web1 = token_id(story.tokens["web1"])
    n = len(rows(story))
    taken = story.client.post("/v1/hosts/web1/reboot-lease", json={"bootId": "b1"}, headers=story.auth("web1"))
    assert taken.status_code == 200 and taken.json()["granted"], taken.text
    row = one(story, n)
    assert (row["principal"], row["token"], row["action"], row["resource"], row["outcome"], row["status"]) == (
        "agent@host:web1", web1, "fleet:TakeRebootLease", 'Host::"web1"', "allowed", 200)
    assert row["request"] == "POST /v1/hosts/web1/reboot-lease" and row["source"] and row["policy"]
    assert (row["seq"], row["prev"], row["hash"]) == (None, None, None)  # written now, sealed into the chain later

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


def statements(story: Story) -> list[str]:
    """The statements the story's store runs from now on (a list that fills as they run)."""
    seen: list[str] = []

    def spy(_conn, _cursor, statement, *_args):  # type: ignore[no-untyped-def]
        seen.append(" ".join(statement.split()))

    sa.event.listen(story.store.engine, "before_cursor_execute", spy)
    return seen


def test_an_admitted_pass_report_leaves_one_row_written_with_the_pass(story):
    """Every state-changing request leaves its row, a pass report too: written with the pass, in its transaction
    (on PostgreSQL in the intake's one statement, no round trip more); its principal, token id, action, resource."""
    web1 = token_id(story.tokens["web1"])
    n = len(rows(story))
    report = pass_report("web1") | {"passId": "p1", "seq": 1}
    seen = statements(story)
    posted = story.client.post("/v1/hosts/web1/passes", json=report, headers=story.auth("web1"))
    assert posted.status_code == 201, posted.text
    row = one(story, n)
    assert (row["principal"], row["token"], row["action"], row["resource"], row["outcome"], row["status"]) == (
        "agent@host:web1", web1, "fleet:ReportPass", 'Host::"web1"', "allowed", 201)
    assert row["request"] == "POST /v1/hosts/web1/passes" and row["source"] and row["policy"]
    assert (row["seq"], row["hash"]) == (None, None)  # sealed into the chain later
    into = [s for s in seen if "audit_log" in s and not s.startswith("SELECT")]  # the test's own reads left out
    if story.store.dialect == "postgresql":  # the intake's own statement carried it: one statement, one round trip
        assert len(into) == 1 and into[0].startswith("WITH") and "INSERT INTO hosts" in into[0], into
    else:
        assert len(into) == 1 and into[0].startswith("INSERT INTO audit_log"), into

    n = len(rows(story))  # the same pass again: nothing stored, its row written with the answer
    again = story.client.post("/v1/hosts/web1/passes", json=report, headers=story.auth("web1"))
    assert again.status_code == 200 and again.headers["datum-pass"] == "duplicate"
    row = one(story, n)
    assert (row["action"], row["outcome"], row["status"]) == ("fleet:ReportPass", "allowed", 200)
    n = len(rows(story))  # a report the intake refuses (for another host than its path's): one row, its answer
    bad = story.client.post("/v1/hosts/web1/passes", json=pass_report("web2"), headers=story.auth("web1"))
    assert bad.status_code == 422
    assert (one(story, n)["status"], one(story, n)["action"]) == (422, "fleet:ReportPass")
    n = len(rows(story))
    refused = story.client.post("/v1/hosts/web2/passes", json=pass_report("web2"), headers=story.auth("web1"))
    assert refused.status_code == 403
    row = one(story, n)
    assert (row["action"], row["outcome"], row["status"]) == ("fleet:ReportPass", "denied", 403)
    assert story.client.get("/v1/hosts/web1/passes", headers=story.auth("operator")).status_code == 200


def test_audit_reports_false_leaves_admitted_reports_out(story):
    """``[server] audit_reports = false``: an admitted report leaves no row; one refused still does."""
    state = story.app.state.datum
    state.settings = state.settings.model_copy(
        update={"server": state.settings.server.model_copy(update={"audit_reports": False})})
    n = len(rows(story))
    posted = story.client.post("/v1/hosts/web1/passes", json=pass_report("web1"), headers=story.auth("web1"))
    assert posted.status_code == 201, posted.text
    assert after(story, n) == []
    refused = story.client.post("/v1/hosts/web2/passes", json=pass_report("web2"), headers=story.auth("web1"))
    assert refused.status_code == 403
    assert one(story, n)["outcome"] == "denied"


def test_a_report_whose_transaction_rolls_back_leaves_no_row_saying_it_was_stored(story):
    """A fault injected in the store after the pass's and its row's writes (on PostgreSQL at the commit itself):
    the pass is not stored, and no row says it was; the request's one row says what it was answered."""
    fired = "NEW.action = 'fleet:ReportPass' AND NEW.status = 201"
    with story.store.begin() as conn:
        if story.store.dialect == "postgresql":
            conn.execute(sa.text("CREATE FUNCTION injected_fault() RETURNS trigger LANGUAGE plpgsql AS "
                                 "$$ BEGIN RAISE EXCEPTION 'the disk is full' USING ERRCODE = 'disk_full'; END $$"))
            conn.execute(sa.text("CREATE CONSTRAINT TRIGGER injected_fault AFTER INSERT ON audit_log DEFERRABLE "
                                 f"INITIALLY DEFERRED FOR EACH ROW WHEN ({fired}) EXECUTE FUNCTION injected_fault()"))
        else:  # SQLite has no trigger at the commit: the row's INSERT, the transaction's last statement, fails
            conn.execute(sa.text(f"CREATE TRIGGER injected_fault AFTER INSERT ON audit_log WHEN {fired} "
                                 "BEGIN SELECT json('the disk is full'); END"))
    n = len(rows(story))
    posted = story.client.post("/v1/hosts/web1/passes", json=pass_report("web1") | {"passId": "p1", "seq": 1},
                               headers=story.auth("web1"))
    assert posted.status_code == 503, posted.text
    with story.store.connect() as conn:
        for table in ("hosts", "pass_history", "pass_events"):
            assert conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one() == 0, table
    row = one(story, n)  # not the pass stored (201): the answer the host got
    assert (row["action"], row["status"], row["principal"]) == ("fleet:ReportPass", 503, "agent@host:web1")


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


def test_the_row_is_written_in_the_changes_transaction(story, monkeypatch):
    """A row that cannot be written takes the change with it: the lease is not granted."""
    n = len(rows(story))

    def broken(conn, entry):  # type: ignore[no-untyped-def]
        raise sa.exc.OperationalError("INSERT INTO audit_log", {}, Exception("the disk is full"))

    monkeypatch.setattr(audit, "record", broken)
    taken = story.client.post("/v1/hosts/web1/reboot-lease", json={"bootId": "b1"}, headers=story.auth("web1"))
    assert taken.status_code in (500, 503), taken.text
    with story.store.connect() as conn:
        assert conn.execute(sa.select(reboot_leases.c.host)).first() is None
    assert one(story, n)["status"] == taken.status_code  # the request's one row: its answer's, written with it


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
    assert doc["entries"][0]["action"] == "fleet:ReadAudit" and doc["entries"][0]["outcome"] == "denied"  # newest first
    assert "seq" not in doc["entries"][0] and "hash" not in doc["entries"][0]  # not sealed yet: listed all the same
    rest = story.get(f"/v1/audit?limit=2&principal=operator&cursor={doc['next']}", "admin").json()
    whole = story.get("/v1/audit?limit=100&principal=operator", "admin").json()["entries"]
    assert len(whole) == 4 and doc["entries"] + rest["entries"] == whole
    auditchain.seal(story.store)
    sealed = story.get("/v1/audit?limit=100&principal=operator", "admin").json()["entries"]
    assert [e["seq"] for e in sealed] == sorted((e["seq"] for e in sealed), reverse=True) and sealed[0]["hash"]
    made = story.get("/v1/audit?action=token:Create", "admin").json()["entries"]
    assert made and {e["principal"] for e in made} == {audit.local_principal()}
    assert "tokenId" not in made[0] and made[0]["detail"].startswith("principal ")
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat().replace("+00:00", "Z")
    assert story.get(f"/v1/audit?since={future}", "admin").json() == {"entries": []}
    bad = story.get("/v1/audit?since=yesterday&cursor=x", "admin")
    assert bad.status_code == 422 and {f["field"] for f in bad.json()["issues"][0]["fields"]} == {"since", "cursor"}


def act(story: Story, host: str) -> None:
    """One audited act by ``host``'s agent: its reboot lease taken."""
    taken = story.client.post(f"/v1/hosts/{host}/reboot-lease", json={"bootId": "b1"}, headers=bound(story, host))
    assert taken.status_code == 200, taken.text


def test_the_chain_verifies_breaks_at_an_edited_row_and_survives_pruning(story):
    for host in ("web1", "web2"):
        act(story, host)
    waiting = auditchain.verify(story.store)
    assert waiting.whole and waiting.rows == 0 and waiting.unsealed == len(rows(story))
    assert auditchain.seal(story.store) == len(rows(story))
    found = auditchain.verify(story.store)
    assert found.whole and found.rows == len(rows(story)) and found.head.seq == found.rows and found.unsealed == 0
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


def test_the_chain_verifies_with_report_rows_and_breaks_at_an_edited_one(story):
    for seq, host in enumerate(("web1", "web2", "web1"), 1):
        posted = story.client.post(f"/v1/hosts/{host}/passes", json=pass_report(host) | {"seq": seq},
                                   headers=bound(story, host))
        assert posted.status_code == 201, posted.text
    act(story, "web3")
    assert auditchain.seal(story.store) == len(rows(story))
    found = auditchain.verify(story.store)
    assert found.whole and found.rows == len(rows(story)), found
    reports = [r for r in rows(story) if r["action"] == "fleet:ReportPass"]
    assert len(reports) == 3 and all(r["seq"] and r["hash"] for r in reports)
    with story.store.begin() as conn:  # a report's row edited: another host said to have reported
        conn.execute(sa.update(audit_log).where(audit_log.c.seq == reports[1]["seq"]).values(resource='Host::"db1"'))
    broken = auditchain.verify(story.store)
    assert (broken.whole, broken.broken) == (False, reports[1]["seq"]) and "changed" in (broken.why or "")


def test_pruning_keeps_the_chain_verifiable(story):
    act(story, "web1")
    old = len(rows(story))
    auditchain.seal(story.store)
    time.sleep(0.02)
    cut = datetime.now(UTC)
    time.sleep(0.02)
    for host in ("web2", "web3"):
        act(story, host)
    written = len(rows(story))
    auditchain.seal(story.store, batch=2)
    act(story, "web4")  # not sealed yet (its token's row and its lease's)
    late = len(rows(story)) - written
    assert auditchain.prune(story.store, cut, batch=2) == old
    kept = auditchain.verify(story.store)
    assert kept.whole and kept.anchor.seq == old and kept.rows == written - old and kept.unsealed == late, kept
    assert rows(story)[0]["seq"] == old + 1
    # a row not sealed yet is never pruned, whatever its time; sealed after, it continues the chain from the anchor
    assert auditchain.prune(story.store, datetime.now(UTC) + timedelta(days=1), batch=2) == written - old
    assert [r["seq"] for r in rows(story)] == [None] * late
    auditchain.seal(story.store)
    kept = auditchain.verify(story.store)
    assert kept.whole and kept.anchor.seq == written and kept.rows == late and kept.head.seq == written + late, kept
    with story.store.begin() as conn:  # the oldest row kept deleted by hand: not pruning, a gap after the anchor
        conn.execute(sa.delete(audit_log).where(audit_log.c.seq == written + 1))
    assert auditchain.verify(story.store).broken == written + 1


def test_two_servers_on_one_store_write_one_chain(store_url):
    """Two engines on one database (two replicas' pools), eight writers each at once and each engine sealing all
    the while: one line, no fork, no gap, every row in it."""
    import threading

    from datum.store import open_store

    stores = [open_store(store_url), open_store(store_url)]
    errors: list[BaseException] = []
    done = threading.Event()

    def writer(n: int) -> None:
        try:
            for i in range(15):
                auditchain.write(stores[n % 2], audit.Entry(f"replica{n % 2}", "fleet:ClearRebootLease",
                                                            f'Host::"h{n}-{i}"'))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def sealer(store) -> None:  # type: ignore[no-untyped-def]
        try:
            while not done.is_set():
                auditchain.seal(store, batch=7)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    sealers = [threading.Thread(target=sealer, args=(s,)) for s in stores]
    for t in [*writers, *sealers]:
        t.start()
    for t in writers:
        t.join()
    done.set()
    for t in sealers:
        t.join()
    try:
        assert errors == []
        auditchain.seal(stores[0])
        found = auditchain.verify(stores[1])
        assert found.whole and found.rows == 120 and found.head.seq == 120 and found.unsealed == 0, found
    finally:
        for s in stores:
            s.dispose()


def test_a_row_committed_and_never_sealed_by_its_process_is_sealed_by_the_next(store_url):
    """A process that died between its commit and the seal (nothing of it left but the store): its rows are there,
    listed and counted unsealed, and any other process's seal chains them."""
    import subprocess
    import sys

    from datum.store import open_store

    code = ("import sys; from datum.store import open_store, audit, auditchain; s = open_store(sys.argv[1]); "
            "[auditchain.write(s, audit.Entry('cli:gone', 'token:Revoke', f'Token::\"{i}\"')) for i in range(3)]; "
            "import os; os._exit(0)")
    subprocess.run([sys.executable, "-c", code, store_url], check=True, timeout=120)
    store = open_store(store_url)
    try:
        listed = auditchain.entries(store, principal="cli:gone", limit=10)
        assert [e["resource"] for e in listed] == ['Token::"2"', 'Token::"1"', 'Token::"0"']
        assert all(e["seq"] is None for e in listed)
        assert auditchain.verify(store).unsealed == 3
        assert auditchain.seal(store) == 3
        found = auditchain.verify(store)
        assert found.whole and found.unsealed == 0 and found.rows == 3, found
    finally:
        store.dispose()


def test_a_seal_with_nothing_waiting_writes_nothing(story):
    """``datum serve`` seals every second: with no row waiting, a seal only reads (no lock, no write on the store)."""
    act(story, "web1")
    assert auditchain.seal(story.store) > 0
    statements: list[str] = []

    def seen(_conn, _cursor, statement, *_args):  # type: ignore[no-untyped-def]
        statements.append(statement.lstrip().split()[0].upper())

    sa.event.listen(story.store.engine, "before_cursor_execute", seen)
    try:
        assert auditchain.seal(story.store) == 0
    finally:
        sa.event.remove(story.store.engine, "before_cursor_execute", seen)
    assert statements == ["SELECT"], statements


def test_a_seal_chains_a_batch_of_rows_in_one_update(story):
    """A fleet's reports are hundreds of rows a second: a seal gives a batch their seq and hashes in one UPDATE
    (PostgreSQL: one statement, whatever the batch's size; SQLite: one statement run over the batch), and the
    chain verifies."""
    with story.store.begin() as conn:
        for i in range(1200):
            audit.record(conn, audit.Entry(f"agent@host:h{i}", "fleet:ReportPass", f'Host::"h{i}"', status=201))
    seen = statements(story)
    assert auditchain.seal(story.store, batch=500) == len(rows(story))
    updates = [s for s in seen if s.startswith("UPDATE audit_log ")]
    assert len(updates) == 3, updates  # 500, 500, the rest
    found = auditchain.verify(story.store)
    assert found.whole and found.rows == len(rows(story)) and found.unsealed == 0, found


def test_the_intakes_statement_with_its_audit_row_is_parsed_once(story, monkeypatch):
    """PostgreSQL: psycopg keeps its parse of a statement (placeholders to $n) only up to a length the intake's
    statement with its audit row passes (datum.store.engine.CACHED_STATEMENT raises it): a report's statement is
    taken from that cache, not parsed again each time (0.3-0.4 ms of a report's 2 ms)."""
    if story.store.dialect != "postgresql":
        pytest.skip("psycopg's cache: PostgreSQL only")
    from psycopg import _queries

    parsed: list[bytes] = []
    nocache = _queries._query2pg_nocache

    def spied(query, encoding):  # type: ignore[no-untyped-def]
        parsed.append(query)
        return nocache(query, encoding)

    monkeypatch.setattr(_queries, "_query2pg_nocache", spied)
    for seq in (1, 2, 3):
        posted = story.client.post("/v1/hosts/web1/passes", json=pass_report("web1") | {"seq": seq},
                                   headers=story.auth("web1"))
        assert posted.status_code == 201, posted.text
    assert rows(story)[-1]["action"] == "fleet:ReportPass"
    assert [q for q in parsed if b"INSERT INTO hosts" in q] == []

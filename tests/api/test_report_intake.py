"""What the server takes from an agent, and what a damaged store row becomes.

A posted pass report must hold together (finite numbers, a state its resources
roll up to); it is stored bounded (long diffs cut, with a marker) and without
the diff of a sensitive resource. A stored report that does not read makes its
host ``unknown`` with why, a stored time that does not read is left out, and
every list, the metrics and the page keep answering.
"""

from __future__ import annotations

import copy
import json

import pytest
import sqlalchemy as sa

from datum.fleet.intake import truncated
from datum.host.report import PassReport, ResourceReport
from datum.store.schema import hosts as hosts_table

from .story import pass_report


def post(story, report, host: str = "web1"):  # type: ignore[no-untyped-def]
    return story.client.post(f"/v1/hosts/{host}/passes", json=report, headers=story.agent(host))


def post_raw(story, body: bytes, host: str = "web1"):  # type: ignore[no-untyped-def]
    headers = {**story.agent(host), "Content-Type": "application/json"}
    return story.client.post(f"/v1/hosts/{host}/passes", content=body, headers=headers)


def fields_of(response) -> set[str]:  # type: ignore[no-untyped-def]
    return {f["field"] for issue in response.json()["issues"] for f in issue.get("fields", [])}


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_report_with_a_number_that_is_not_finite_is_422(story, number):
    body = json.dumps(pass_report()).replace('"durationSeconds": 2.0', f'"durationSeconds": {number}')
    assert number in body
    r = post_raw(story, body.encode())
    assert r.status_code == 422, r.text
    assert r.json()["issues"][0]["code"] == "INVALID_INPUT"
    assert "durationSeconds" in fields_of(r)
    nested = copy.deepcopy(pass_report())
    nested["resources"][0]["durationSeconds"] = 0.5
    text = json.dumps(nested).replace('"durationSeconds": 0.5', f'"durationSeconds": {number}')
    r = post_raw(story, text.encode())
    assert r.status_code == 422 and "resources[0].durationSeconds" in fields_of(r), r.text
    assert story.get("/v1/hosts").json()["hosts"] == []  # nothing stored


def test_a_converged_report_with_a_failed_resource_is_422(story):
    r = post(story, pass_report(state="converged"))
    assert r.status_code == 422, r.text
    assert "state" in fields_of(r)
    assert "roll up to 'failed'" in r.text
    lying = pass_report(state="failed")
    lying["resources"] = [lying["resources"][0]]  # only a converged resource
    assert post(story, lying).status_code == 422
    assert post(story, pass_report(state="unknown")).status_code == 422
    assert post(story, pass_report(state="failed")).status_code == 201
    if "incomplete" in PassReport.model_fields:  # a pass stopped by SIGTERM says unknown, whatever it reached
        stopped = pass_report(state="unknown") | {"incomplete": True}
        stopped["resources"][2]["state"] = "pending"
        assert post(story, stopped).status_code == 201


def test_a_host_back_from_its_reboot_unhealthy_is_degraded_whatever_its_agent_says(story):
    """Its resources converged, its health check failing: degraded (contract section 2, rule 5). An agent older than
    the rule says converged: stored degraded with the check's words; a report degraded for nothing is refused."""
    healthy = pass_report(state="converged")
    healthy.update(exitCode=0, counts={"converged": 1}, resources=healthy["resources"][:1])
    healthy.pop("reason")
    older = healthy | {"health": {"ok": False, "detail": "health_url http://127.0.0.1:9/ answered 503"}}
    assert post(story, older).status_code == 201
    row = story.get("/v1/hosts/web1").json()
    said = "came back unhealthy: health_url http://127.0.0.1:9/ answered 503"
    assert (row["state"], row["reason"], row["report"]["state"]) == ("degraded", said, "degraded"), row
    newer = older | {"host": "web2", "state": "degraded", "reason": said, "exitCode": 32}
    assert post(story, newer, host="web2").status_code == 201
    assert story.get("/v1/hosts/web2").json()["state"] == "degraded"
    for_nothing = healthy | {"host": "web3", "state": "degraded", "reason": said}
    r = post(story, for_nothing, host="web3")
    assert r.status_code == 422 and "roll up to 'converged'" in r.text, r.text
    back = healthy | {"host": "web4", "health": {"ok": True, "detail": "health_check passed"}}
    assert post(story, back, host="web4").status_code == 201
    assert story.get("/v1/hosts/web4").json()["state"] == "converged"


def test_a_long_diff_is_stored_cut_with_a_marker(story):
    limit = story.settings.server.max_diff_bytes
    report = pass_report(state="drifted")
    report["mode"] = "observe"
    report["resources"] = [
        {"id": "File[big]", "type": "File", "name": "big", "action": "update", "state": "drifted",
         "diff": "+" + "é" * limit},
    ]
    r = post(story, report)
    assert r.status_code == 201, r.text
    diff = story.get("/v1/hosts/web1").json()["report"]["resources"][0]["diff"]
    assert diff.endswith(f"... (diff truncated at {limit} bytes)\n")
    assert len(diff.encode()) < limit + 100
    assert truncated("short", limit) == "short"


def test_a_diff_the_agent_redacted_stays_redacted(story):
    marker = "(diff redacted: sensitive: true)\n"  # what the agent posts for a sensitive file
    report = pass_report(state="drifted")
    report["mode"] = "observe"
    report["resources"] = [
        {"id": "File[shadow]", "type": "File", "name": "shadow", "action": "update", "state": "drifted",
         "diff": marker},
    ]
    assert post(story, report).status_code == 201
    (served,) = story.get("/v1/hosts/web1").json()["report"]["resources"]
    assert served["diff"] == marker


def test_a_diff_the_report_marks_sensitive_is_never_stored_nor_served(story):
    if "sensitive" not in ResourceReport.model_fields:
        pytest.skip("the pass report has no 'sensitive' field yet (the host agent's side)")
    report = pass_report(state="drifted")
    report["mode"] = "observe"
    report["resources"] = [
        {"id": "File[shadow]", "type": "File", "name": "shadow", "action": "update", "state": "drifted",
         "sensitive": True, "diff": "-root:$6$secret\n+root:$6$other\n"},
    ]
    assert post(story, report).status_code == 201
    with story.store.connect() as conn:
        stored = conn.execute(sa.select(hosts_table.c.report)).scalar_one()
    assert "secret" not in str(stored)
    assert "secret" not in story.get("/v1/hosts/web1").text


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("{not json", "not valid JSON"),
        ('{"host": "web2"}', "cannot be read"),
        ('"a string"', "cannot be read"),
        ('{"host": "web2", "mode": "enforce", "state": "failed", "resources": [{"id": 5}]}', "cannot be read"),
        # JSON has no Infinity (issue 40): read as converged with durationSeconds null before
        ("INFINITY", "Infinity is not a JSON value"),
    ],
)
def test_a_stored_report_that_does_not_read_makes_its_host_unknown_with_why(story, raw, why):
    assert post(story, pass_report("web1")).status_code == 201
    assert post(story, pass_report("web2"), host="web2").status_code == 201
    if raw == "INFINITY":  # the report as stored, one number made Infinity
        raw = json.dumps({**pass_report("web2"), "durationSeconds": float("inf")})
    with story.store.begin() as conn:
        conn.execute(
            sa.text("UPDATE hosts SET report = :raw WHERE host = 'web2'"), {"raw": raw}
        )
    listed = story.get("/v1/hosts")
    assert listed.status_code == 200, listed.text
    by_host = {h["host"]: h for h in listed.json()["hosts"]}
    assert by_host["web1"]["state"] == "failed"
    assert by_host["web2"]["state"] == "failed"  # the listing reads the summary written at intake, not the report
    assert "report" not in by_host["web2"]
    one = story.get("/v1/hosts/web2")
    assert one.status_code == 200 and one.json()["state"] == "unknown" and why in one.json()["reason"]
    page = story.get("/ui/overview")
    assert page.status_code == 200 and "web2" in page.text


@pytest.mark.parametrize(("raw", "why"), [("{not json", "not valid JSON"), ('"a string"', "not an object")])
def test_a_stored_summary_that_does_not_read_makes_its_host_unknown_in_the_listing(story, raw, why):
    assert post(story, pass_report("web1")).status_code == 201
    assert post(story, pass_report("web2"), host="web2").status_code == 201
    with story.store.begin() as conn:
        conn.execute(sa.text("UPDATE hosts SET summary = :raw WHERE host = 'web2'"), {"raw": raw})
    listed = story.get("/v1/hosts")
    assert listed.status_code == 200, listed.text
    by_host = {h["host"]: h for h in listed.json()["hosts"]}
    assert by_host["web1"]["state"] == "failed" and by_host["web1"]["counts"] == {"converged": 1, "failed": 1, "blocked": 1}
    assert by_host["web2"]["state"] == "unknown" and why in by_host["web2"]["reason"]
    assert by_host["web2"]["counts"] == {} and by_host["web2"]["attention"] == []
    assert story.get("/v1/hosts/web2").json()["state"] == "failed"  # the report itself reads


def test_a_stored_state_that_is_not_a_host_state_reads_unknown(story):
    assert post(story, pass_report("web1")).status_code == 201
    with story.store.begin() as conn:
        conn.execute(sa.text("UPDATE hosts SET state = 'exploded' WHERE host = 'web1'"))
    (one,) = story.get("/v1/hosts").json()["hosts"]
    assert one["state"] == "unknown" and "exploded" in one["reason"]
    metrics = story.get("/metrics", principal="admin").text
    assert 'datum_hosts{state="unknown"} 1.0' in metrics


# Each (column, value) edited into a host of its own: one server answers for all of them.
TAMPERED = [(c, t) for c in ("updated_at", "finished_at") for t in ("not a time", "2026-13-45 25:61:00", "", 1234567)]


def test_a_stored_time_edited_by_hand_reads_unknown_and_everything_else_answers(tmp_path, datum_cli):
    """A ``hosts`` time that SQLite holds as text no date parser reads (edited by hand) is left out of that
    host (absent: unknown, as optional fields are); the listing, the host, /metrics, the page and
    ``datum hosts`` answer, every other field and host as before. Against ``datum serve`` on loopback;
    every kind of edit at once, one host each (``web1`` untouched)."""
    import httpx

    from datum.api.front import tokens
    from datum.store import open_store

    from .story import config_file, serving

    cfg = config_file(tmp_path, scheduler=False)
    store = open_store(f"sqlite:///{tmp_path / 'datum.db'}")
    admin = tokens.create(store, "admin")
    edited = {f"web{i}": case for i, case in enumerate(TAMPERED, start=2)}
    with serving(cfg, tmp_path / "serve.log") as base:
        for host in ("web1", *edited):
            agent = tokens.create(store, "agent", host)
            stored = httpx.post(f"{base}v1/hosts/{host}/passes", json=pass_report(host),
                                headers={"Authorization": f"Bearer {agent}"})
            assert stored.status_code == 201, stored.text
        with store.begin() as conn:
            for host, (column, tampered) in edited.items():
                conn.execute(sa.text(f"UPDATE hosts SET {column} = :t WHERE host = :h"), {"t": tampered, "h": host})
        auth = {"Authorization": f"Bearer {admin}"}
        listed = httpx.get(f"{base}v1/hosts", headers=auth)
        assert listed.status_code == 200, listed.text
        by_host = {h["host"]: h for h in listed.json()["hosts"]}
        assert listed.json()["counts"]["failed"] == 1 + len(edited)

        def rest(row: dict) -> dict:
            return {k: v for k, v in row.items() if k not in ("host", "updatedAt", "finishedAt")}

        metrics = httpx.get(f"{base}metrics", headers=auth)
        assert metrics.status_code == 200, metrics.text
        assert 'datum_host_seconds_since_last_report{host="web1"}' in metrics.text
        for host, (column, tampered) in edited.items():
            row, case = by_host[host], (host, column, tampered)
            field = {"updated_at": "updatedAt", "finished_at": "finishedAt"}[column]
            assert field in by_host["web1"] and field not in row, case  # absent: not known
            assert ({"updatedAt", "finishedAt"} - {field}) <= row.keys(), case
            assert rest(row) == rest(by_host["web1"]) and row["state"] == "failed", case
            one = httpx.get(f"{base}v1/hosts/{host}", headers=auth)
            assert one.status_code == 200 and field not in one.json() and one.json()["state"] == "failed", (case, one.text)
            assert f'datum_host_state{{host="{host}",state="failed"}} 1.0' in metrics.text, case
            since = f'datum_host_seconds_since_last_report{{host="{host}"}}' in metrics.text
            assert since == (column != "updated_at"), case
        page = httpx.get(f"{base}ui/overview", headers=auth)
        assert page.status_code == 200 and all(host in page.text for host in edited)
    code, out, err = datum_cli("hosts", "--config", str(cfg))
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines() if line.startswith("web")}
    assert code == 0 and rows == dict.fromkeys(["web1", *edited], "failed"), out + err
    store.dispose()

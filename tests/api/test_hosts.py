"""Host endpoints: an agent posts a pass report, operators read the host's state and last pass."""

from __future__ import annotations

import sqlalchemy as sa

from datum.host.report import PassReport
from datum.store.hosts import hosts as hosts_table

from .story import pass_report


def test_an_agent_reports_a_pass_and_an_operator_reads_it(story):
    r = story.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=story.agent("web1"))
    assert r.status_code == 201, r.text
    stored = r.json()
    assert (stored["host"], stored["state"], stored["reason"]) == ("web1", "failed", "File[motd] failed: permission denied")
    assert [a["id"] for a in stored["attention"]] == ["File[motd]", "Service[nginx]"]

    listing = story.get("/v1/hosts").json()
    (listed,) = listing["hosts"]
    assert listing["counts"]["failed"] == 1 and listing["total"] == 1 and "next" not in listing
    # the listing's row is the summary: the same fields but the report, the attention without diffs
    assert {k: v for k, v in stored.items() if k not in ("report", "attention")} == {
        k: v for k, v in listed.items() if k != "attention"
    }
    assert listed["attention"] == [{k: v for k, v in a.items() if k != "diff"} for a in stored["attention"]]
    assert listed["counts"] == {"converged": 1, "failed": 1, "blocked": 1} and listed["stale"] is False

    one = story.get("/v1/hosts/web1").json()
    assert one == stored
    assert one["report"] == PassReport.model_validate(pass_report()).dump()  # defaults filled in
    assert one["bootId"] == "b00t" and one["finishedAt"] == "2026-11-01T12:00:02Z"
    assert "updatedAt" in one


def test_a_later_pass_replaces_the_last_one(story):
    story.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=story.agent("web1"))
    converged = pass_report(state="converged") | {"resources": [], "reason": None, "counts": {}, "exitCode": 0}
    converged = {k: v for k, v in converged.items() if v is not None}
    assert story.client.post("/v1/hosts/web1/passes", json=converged, headers=story.agent("web1")).status_code == 201
    one = story.get("/v1/hosts/web1").json()
    assert one["state"] == "converged" and "reason" not in one and one["attention"] == []


def test_the_host_of_the_path_must_be_the_host_of_the_report(story):
    r = story.client.post("/v1/hosts/web2/passes", json=pass_report("web1"), headers=story.agent("web2"))
    assert r.status_code == 422
    (issue,) = r.json()["issues"]
    assert issue["code"] == "INVALID_INPUT"
    assert issue["fields"][0]["field"] == "host"
    assert story.get("/v1/hosts").json()["hosts"] == []


def test_an_invalid_report_lists_every_field_finding(story):
    bad = pass_report() | {"state": "happy", "mode": "yolo", "extra": 1}
    r = story.client.post("/v1/hosts/web1/passes", json=bad, headers=story.agent("web1"))
    assert r.status_code == 422
    (issue,) = r.json()["issues"]
    assert issue["code"] == "INVALID_INPUT"
    fields = {f["field"]: f["message"] for f in issue["fields"]}
    assert {"state", "mode", "extra"} <= set(fields)
    assert fields["extra"] == "unknown field"


def test_a_body_that_is_not_json_is_422(story):
    r = story.client.post(
        "/v1/hosts/web1/passes", content=b"{nope", headers={**story.agent("web1"), "Content-Type": "application/json"}
    )
    assert r.status_code == 422
    assert r.json()["issues"][0]["code"] == "INVALID_INPUT"


def test_an_unknown_host_is_404(story):
    r = story.get("/v1/hosts/nowhere")
    assert r.status_code == 404
    (issue,) = r.json()["issues"]
    assert issue["code"] == "NOT_FOUND" and "nowhere" in issue["message"]


def test_a_stored_report_that_cannot_be_read_makes_the_host_unknown(story):
    story.client.post("/v1/hosts/web1/passes", json=pass_report(), headers=story.agent("web1"))
    with story.store.begin() as conn:
        conn.execute(sa.update(hosts_table).values(report={"garbage": True}))
    one = story.get("/v1/hosts/web1").json()
    assert one["state"] == "unknown" and "cannot be read" in one["reason"]
    assert "report" not in one

"""Every pass kept and queryable (issue 23 items 1 and 2), through the real app on SQLite and PostgreSQL:
``GET /v1/hosts/{host}/passes[/{pass}]`` and ``GET /v1/events``, their pages, filters and Cedar action."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from datum.store.passes import retain

from .story import build_story, pass_report

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def story(tmp_path, store_url):
    s = build_story(tmp_path, store_url)
    yield s
    s.client.close()
    s.store.dispose()


def a_pass(seq: int, *, failed: bool = False, minutes: int | None = None, host: str = "web1") -> dict:
    """Pass ``seq`` of ``host``, run ``minutes`` (default ``seq``) after T0; converged unless ``failed``."""
    report = pass_report(host, "failed" if failed else "converged")
    if not failed:
        report |= {"resources": report["resources"][:1], "counts": {"converged": 1}, "exitCode": 0}
        report.pop("reason")
    started = T0 + timedelta(minutes=seq if minutes is None else minutes)
    return report | {
        "seq": seq, "passId": f"{host}-pass-{seq}", "startedAt": started.isoformat(),
        "finishedAt": (started + timedelta(seconds=2)).isoformat(), "durationSeconds": 2.0,
    }


def post(story, report: dict, expect: int = 201):  # type: ignore[no-untyped-def]
    r = story.client.post(f"/v1/hosts/{report['host']}/passes", json=report, headers=story.agent(report['host']))
    assert r.status_code == expect, r.text
    return r


def passes(story, query: str = "", host: str = "web1") -> dict:  # type: ignore[no-untyped-def]
    r = story.get(f"/v1/hosts/{host}/passes{query}")
    assert r.status_code == 200, r.text
    return r.json()


def count(story, table: str) -> int:  # type: ignore[no-untyped-def]
    with story.store.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())


def test_every_pass_is_kept_with_the_times_the_host_measured_and_the_time_received(story):
    before = datetime.now(UTC)
    for seq in (1, 2, 3):  # delivered together, after an outage: measured minutes apart
        post(story, a_pass(seq, failed=seq == 2))
    after = datetime.now(UTC)
    doc = passes(story)
    rows = doc["passes"]
    assert [r["passId"] for r in rows] == ["web1-pass-3", "web1-pass-2", "web1-pass-1"]  # newest first
    assert [r["state"] for r in rows] == ["converged", "failed", "converged"]
    for r in rows:
        finished = datetime.fromisoformat(r["finishedAt"])
        assert finished == T0 + timedelta(minutes=r["seq"], seconds=2)  # the host's clock, not the receipt
        assert datetime.fromisoformat(r["startedAt"]) == T0 + timedelta(minutes=r["seq"])
        assert before - timedelta(seconds=1) <= datetime.fromisoformat(r["receivedAt"]) <= after + timedelta(seconds=1)
        assert r["older"] is False
    assert rows[1]["counts"] == {"converged": 1, "failed": 1, "blocked": 1} and rows[1]["attention"] == 2
    assert "report" not in rows[0] and "next" not in doc


def test_a_pass_that_changed_nothing_is_a_small_row_naming_a_report_already_kept(story):
    post(story, a_pass(1))
    post(story, a_pass(2))  # says what pass 1 said: only its ids and times differ
    post(story, a_pass(3, failed=True))
    assert count(story, "pass_reports") == 2  # the converged report once, the failed one
    with story.store.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT pass_id, digest FROM pass_history WHERE subject = 'host' ORDER BY id"
        )).all()
        columns = {c["name"] for c in sa.inspect(conn).get_columns("pass_history")}
    assert "report" not in columns  # a pass row never holds a copy of a report
    assert rows[0].digest == rows[1].digest != rows[2].digest
    # the second pass's whole report: the kept one with its own ids and times
    r = story.get("/v1/hosts/web1/passes/web1-pass-2")
    assert r.status_code == 200, r.text
    detail = r.json()
    assert detail["report"]["passId"] == "web1-pass-2" and detail["report"]["seq"] == 2
    assert detail["report"]["finishedAt"].startswith("2026-11-01T12:02:02")
    assert [(x["id"], x["state"]) for x in detail["report"]["resources"]] == [("Package[nginx]", "converged")]
    by_id = story.get(f"/v1/hosts/web1/passes/{detail['id']}").json()
    assert by_id["passId"] == "web1-pass-2"
    assert story.get("/v1/hosts/web1/passes/nope").status_code == 404
    for digits in ("²", "①", "٣"):  # digits to str.isdigit, not to int: a 500 with a traceback before (issue 40)
        assert story.get(f"/v1/hosts/web1/passes/{digits}").status_code == 404
    assert story.get("/v1/hosts/web2/passes/web1-pass-2").status_code == 404  # another host's pass


def test_the_pass_report_has_its_sensitive_diffs_redacted_as_the_host_has(story):
    report = a_pass(1, failed=True)
    report["resources"][1] |= {"diff": "--- secret\n+++ secret\n", "sensitive": True}
    post(story, report)
    detail = story.get("/v1/hosts/web1/passes/web1-pass-1").json()
    host = story.get("/v1/hosts/web1").json()
    assert detail["report"]["resources"][1]["diff"] == host["report"]["resources"][1]["diff"]
    assert "secret" not in str(detail)


def test_an_older_pass_is_kept_without_becoming_the_hosts_state(story):
    post(story, a_pass(5))
    r = post(story, a_pass(4, failed=True), expect=200)
    assert r.headers["datum-pass"] == "older"
    post(story, a_pass(4, failed=True), expect=200)  # sent again: kept once
    assert story.get("/v1/hosts/web1").json()["state"] == "converged"
    rows = passes(story)["passes"]
    assert [(r["seq"], r["state"], r["older"]) for r in rows] == [(5, "converged", False), (4, "failed", True)]
    events = story.get("/v1/events?host=web1").json()["events"]
    assert {(e["pass"], e["resource"], e["state"]) for e in events} == {
        ("web1-pass-4", "File[motd]", "failed"), ("web1-pass-4", "Service[nginx]", "blocked"),
    }


def test_pages_never_skip_nor_repeat_whatever_is_written_meanwhile(story):
    for seq in range(1, 8):
        post(story, a_pass(seq, minutes=3 if seq in (3, 4, 5) else seq))  # three passes finished at one time
    seen, url, pages = [], "/v1/hosts/web1/passes?limit=2", 0
    while True:
        r = story.get(url)
        doc = r.json()
        seen += [p["seq"] for p in doc["passes"]]
        pages += 1
        if pages == 2:
            post(story, a_pass(8, minutes=60))  # newer than the walk: not in its later pages
        if "next" not in doc:
            break
        assert r.headers["link"].endswith(f'cursor={doc["next"]}>; rel="next"')
        url = f"/v1/hosts/web1/passes?limit=2&cursor={doc['next']}"
    assert sorted(seen) == list(range(1, 8)) and len(seen) == 7
    assert seen[:1] == [7] and seen[-2:] == [2, 1]


def test_filters_window_and_state(story):
    for seq in range(1, 6):
        post(story, a_pass(seq, failed=seq in (2, 4)))
    since = (T0 + timedelta(minutes=2)).isoformat()
    until = (T0 + timedelta(minutes=4)).isoformat()
    got = passes(story, f"?since={since}&until={until}".replace("+", "%2B"))
    assert [p["seq"] for p in got["passes"]] == [3, 2]  # finished at or after since, before until
    assert [p["seq"] for p in passes(story, "?state=failed")["passes"]] == [4, 2]
    assert passes(story, f"?since={until}&until={since}".replace("+", "%2B"))["passes"] == []
    unknown = story.get("/v1/hosts/never-seen/passes")
    assert unknown.status_code == 404 and unknown.json()["issues"][0]["code"] == "NOT_FOUND", unknown.text


def test_fleet_events_one_row_per_resource_that_changed_failed_drifted_or_blocked(story):
    post(story, a_pass(1))  # nothing changed: no event
    post(story, a_pass(2, failed=True))
    changed = a_pass(3, host="web2")
    changed["resources"][0] |= {"action": "create", "changed": True}
    post(story, changed)
    r = story.get("/v1/events")
    assert r.status_code == 200, r.text
    events = r.json()["events"]
    assert [(e["host"], e["resource"], e["action"], e["state"], e["changed"]) for e in events] == [
        ("web2", "Package[nginx]", "create", "converged", True),
        ("web1", "Service[nginx]", "restart", "blocked", False),
        ("web1", "File[motd]", "update", "failed", False),
    ]
    failed = events[2]
    assert failed["reason"] == "permission denied" and failed["pass"] == "web1-pass-2"
    assert failed["finishedAt"].startswith("2026-11-01T12:02:02")
    assert [e["resource"] for e in story.get("/v1/events?state=failed").json()["events"]] == ["File[motd]"]
    assert [e["host"] for e in story.get("/v1/events?host=web2").json()["events"]] == ["web2"]
    assert [e["host"] for e in story.get("/v1/events?type=Service&action=restart").json()["events"]] == ["web1"]
    assert story.get("/v1/events?resource=File%5Bmotd%5D").json()["events"][0]["state"] == "failed"
    since = (T0 + timedelta(minutes=3)).isoformat().replace("+", "%2B")
    assert [e["host"] for e in story.get(f"/v1/events?since={since}").json()["events"]] == ["web2"]
    first = story.get("/v1/events?limit=2").json()
    rest = story.get(f"/v1/events?limit=2&cursor={first['next']}").json()
    assert [e["id"] for e in first["events"] + rest["events"]] == [e["id"] for e in events] and "next" not in rest


def test_a_failed_resource_s_error_is_said_once_in_its_event(story):
    """The engine gives a failure the same words as reason and error (``datum.host.executor``): the event said
    them twice (``permission denied: permission denied``); a reason that already ends with its error too."""
    report = a_pass(1, failed=True)
    report["resources"][1] |= {"reason": "permission denied: /etc/motd", "error": "permission denied: /etc/motd"}
    post(story, report)
    other = a_pass(2, failed=True, host="web2")
    other["resources"][1] |= {"reason": "write /etc/motd: permission denied", "error": "permission denied"}
    post(story, other)
    third = a_pass(3, failed=True, host="web3")
    third["resources"][1] |= {"reason": "could not write", "error": "permission denied"}
    post(story, third)
    said = {e["host"]: e["reason"] for e in story.get("/v1/events?state=failed").json()["events"]}
    assert said == {"web1": "permission denied: /etc/motd", "web2": "write /etc/motd: permission denied",
                    "web3": "could not write: permission denied"}


def test_fleet_events_until_keeps_passes_finished_before_it_and_with_since_a_window(story):
    for seq in (2, 4, 6):
        post(story, a_pass(seq, failed=True))  # each: File[motd] failed, Service[nginx] blocked
    changed = a_pass(3, host="web2")
    changed["resources"][0] |= {"action": "create", "changed": True}
    post(story, changed)

    def at(minutes: int, seconds: int = 0) -> str:
        return (T0 + timedelta(minutes=minutes, seconds=seconds)).isoformat().replace("+", "%2B")

    def passes_of(query: str) -> list[str]:
        r = story.get(f"/v1/events{query}")
        assert r.status_code == 200, r.text
        return list(dict.fromkeys(e["pass"] for e in r.json()["events"]))  # newest first, each pass once

    assert passes_of("") == ["web1-pass-6", "web1-pass-4", "web2-pass-3", "web1-pass-2"]
    assert passes_of(f"?until={at(4)}") == ["web2-pass-3", "web1-pass-2"]  # pass 4 finished at 12:04:02
    assert passes_of(f"?until={at(4, 2)}") == ["web2-pass-3", "web1-pass-2"]  # before until, not at it
    assert passes_of(f"?until={at(4, 3)}") == ["web1-pass-4", "web2-pass-3", "web1-pass-2"]
    assert passes_of(f"?since={at(3)}&until={at(5)}") == ["web1-pass-4", "web2-pass-3"]
    assert passes_of(f"?since={at(3)}&until={at(5)}&host=web1") == ["web1-pass-4"]
    assert passes_of(f"?since={at(5)}&until={at(3)}") == []
    assert passes_of(f"?until={at(0)}") == []


def test_bad_filters_are_422_naming_each(story):
    r = story.get("/v1/events?since=yesterday&until=2026-11-01T12:00:00&state=happy&action=smash&limit=0&cursor=x")
    assert r.status_code == 422, r.text
    (issue,) = r.json()["issues"]
    assert issue["code"] == "INVALID_INPUT"
    fields = {f["field"]: f["message"] for f in issue["fields"]}
    assert set(fields) == {"since", "until", "state", "action", "limit", "cursor"}, fields
    assert "not a cursor of this listing" in fields["cursor"]
    r = story.get("/v1/hosts/web1/passes?state=fine&limit=1001")
    assert r.status_code == 422
    assert {f["field"] for f in r.json()["issues"][0]["fields"]} == {"state", "limit"}


def test_history_needs_fleet_read_history(story):
    post(story, a_pass(1))
    for path in ("/v1/hosts/web1/passes", "/v1/hosts/web1/passes/web1-pass-1", "/v1/events"):
        assert story.client.get(path).status_code == 401
        for principal in ("agent@host:web1", "stranger"):
            r = story.client.get(path, headers=story.auth(principal))
            assert r.status_code == 403, (path, principal)
            assert r.json()["issues"][0]["action"] == "fleet:ReadHistory"
        assert story.get(path, "operator").status_code == 200
        assert story.get(path, "admin").status_code == 200


def test_retention_drops_old_passes_their_events_and_reports_in_batches(story):
    for seq in range(1, 6):
        post(story, a_pass(seq, failed=seq % 2 == 0))
    post(story, a_pass(1, host="web2"))
    with story.store.begin() as conn:  # web1's first four passes were received 20 days ago
        conn.execute(sa.text(
            "UPDATE pass_history SET at = :old WHERE subject = 'host' AND name = 'web1' AND seq <= 4"
        ), {"old": datetime.now(UTC) - timedelta(days=20)})
        conn.execute(sa.text("UPDATE pass_reports SET last_seen = :old WHERE host = 'web1'"),
                     {"old": datetime.now(UTC) - timedelta(days=20)})
        conn.execute(sa.text("UPDATE pass_reports SET last_seen = :now WHERE digest = (SELECT digest FROM "
                             "pass_history WHERE name = 'web1' AND seq = 5)"), {"now": datetime.now(UTC)})
    assert count(story, "pass_events") == 4
    assert retain(story.store, timedelta(days=14), batch=3) == 4  # two batches: 3 and 1
    assert [p["seq"] for p in passes(story)["passes"]] == [5]
    assert [p["seq"] for p in passes(story, host="web2")["passes"]] == [1]
    assert count(story, "pass_events") == 0  # the failed passes' events went with them
    assert count(story, "pass_reports") == 2  # web1's converged report (its pass 5 names it) and web2's
    assert story.get("/v1/hosts/web1/passes/web1-pass-5").json()["report"]["seq"] == 5
    assert story.get("/v1/hosts/web1/passes/web1-pass-2").status_code == 404


def test_the_host_page_lists_its_kept_passes_with_what_each_did_and_diffs_redacted(story):
    report = a_pass(1, failed=True)
    report["resources"][1] |= {"diff": "--- secret\n+++ secret\n", "sensitive": True}
    post(story, report)
    quiet = a_pass(2)
    quiet["resources"][0] |= {"diff": "--- a\n+++ b\n+hello from datum\n", "action": "update", "changed": True}
    post(story, quiet)
    page = story.get("/ui/hosts/web1")
    assert page.status_code == 200, page.text
    html = page.text
    kept = html[html.index('class="kept-passes'):]
    assert kept.index('id="pass-') < kept.index("+hello from datum") < kept.index("permission denied")  # newest first
    assert "(diff redacted: the resource is sensitive)" in kept and "secret" not in html
    assert "2 resources changed, failed, drifted or blocked" in kept


def test_the_host_page_leaves_kept_passes_out_without_read_history(tmp_path, store_url):
    policy = tmp_path / "p.cedar"
    policy.write_text('permit (principal == Principal::"operator", action == Action::"fleet:ReadHost", resource);\n'
                      'permit (principal, action == Action::"fleet:ReportPass", resource is Host) when { principal has host && principal.host == resource };\n')
    s = build_story(tmp_path, store_url, policy=str(policy))
    try:
        post(s, a_pass(1, failed=True))
        html = s.get("/ui/hosts/web1").text
        assert "permission denied" not in html.split('id="passes"')[1] and "fleet:ReadHistory" in html
        assert s.get("/v1/hosts/web1/passes").status_code == 403
    finally:
        s.client.close()
        s.store.dispose()


def test_the_page_has_the_fleets_timeline_of_the_last_hour_or_day(story):
    now = datetime.now(UTC)

    def at(report: dict, ago: timedelta) -> dict:
        return report | {"startedAt": (now - ago).isoformat(), "finishedAt": (now - ago).isoformat()}

    post(story, at(a_pass(1, failed=True), timedelta(hours=5)))  # in the day, not in the hour
    changed = a_pass(2, host="web2")
    changed["resources"][0] |= {"action": "create", "changed": True}
    post(story, at(changed, timedelta(minutes=10)))
    html = story.get("/ui/overview").text
    timeline = html[html.index('id="changes"'):]
    timeline = timeline[:timeline.index("</section>")]
    assert "in the last hour, newest first" in timeline
    assert 'href="/hosts/web2"' in timeline and "Package[" in timeline and ">created<" in timeline
    assert "permission denied" not in timeline and "web1" not in timeline
    day = story.get("/ui/overview?changes=1d").text
    day = day[day.index('id="changes"'):]
    day = day[:day.index("</section>")]
    assert day.index("web2") < day.index("web1")  # newest first
    assert "permission denied" in day and ">failed<" in day and 'href="?changes=1h#changes"' in day
    assert story.get("/ui/overview?changes=1w").status_code == 422


def test_the_timeline_is_left_out_without_read_history(tmp_path, store_url):
    policy = tmp_path / "p.cedar"
    policy.write_text('permit (principal == Principal::"operator", action == Action::"observability:ReadSubstrate", resource);\n'
                      'permit (principal, action == Action::"fleet:ReportPass", resource is Host) when { principal has host && principal.host == resource };\n')
    s = build_story(tmp_path, store_url, policy=str(policy))
    try:
        post(s, a_pass(1, failed=True) | {"finishedAt": datetime.now(UTC).isoformat()})
        html = s.get("/ui/overview").text
        timeline = html[html.index('id="changes"'):]
        assert "fleet:ReadHistory" in timeline.split("</section>")[0] and "permission denied" not in html
    finally:
        s.client.close()
        s.store.dispose()


def test_the_server_keeps_passes_as_long_as_server_retention_says(tmp_path, store_url):
    """``[server] retention`` (default ``14d``) is what ``datum serve`` keeps: its first run of the retention is
    at start, and drops the passes received longer ago than that, and only those."""
    import gc

    from fastapi.testclient import TestClient

    from datum.api.server import serving_app
    from datum.config import Settings

    assert Settings.model_validate({}).server.retention == timedelta(days=14)
    story = build_story(tmp_path, store_url, retention="1d")
    assert story.settings.server.retention == timedelta(days=1)
    try:
        for seq in (1, 2, 3):
            post(story, a_pass(seq))
        with story.store.begin() as conn:  # passes 1 and 2 received two days ago, 3 an hour ago
            conn.execute(sa.text("UPDATE pass_history SET at = :at WHERE name = 'web1' AND seq <= 2"),
                         {"at": datetime.now(UTC) - timedelta(days=2)})
            conn.execute(sa.text("UPDATE pass_history SET at = :at WHERE name = 'web1' AND seq = 3"),
                         {"at": datetime.now(UTC) - timedelta(hours=1)})
        app = serving_app(story.settings, lambda: (story.registry, story.store))
        try:
            with TestClient(app):  # the lifespan: the retention runs at once, on a thread of its own
                deadline = time.monotonic() + 20
                while [p["seq"] for p in passes(story)["passes"]] != [3]:
                    assert time.monotonic() < deadline, passes(story)
                    time.sleep(0.1)
        finally:
            gc.unfreeze()  # the serving app's start freezes the collector's view of the process
    finally:
        story.client.close()
        story.store.dispose()


@pytest.mark.parametrize("year", [1969, 1900, 2400, 9000])
def test_pages_go_on_past_the_ends_of_the_epoch(story, year):
    """Issue 40: a host with a wrong clock (a pass finished in 2400, or before 1970) broke the cursor: the
    server refused its own ``next`` after a year-2400 row, and pages before 1970 repeated for ever."""
    from datum.store.hosts import take_pass

    far = datetime(year, 6, 1, tzinfo=UTC)
    for seq in range(1, 6):  # intake refuses such times (below): stored by another writer, or before the bound
        started = far + timedelta(minutes=seq)
        assert take_pass(story.store, "web1", a_pass(seq) | {
            "startedAt": started.isoformat(), "finishedAt": (started + timedelta(seconds=2)).isoformat()
        }, history=True).outcome == "stored"
    seen, url = [], "/v1/hosts/web1/passes?limit=2"
    for _ in range(10):
        r = story.get(url)
        assert r.status_code == 200, r.text
        seen += [p["seq"] for p in r.json()["passes"]]
        if not r.json().get("next"):
            break
        url = f"/v1/hosts/web1/passes?limit=2&cursor={r.json()['next']}"
    assert sorted(seen) == [1, 2, 3, 4, 5] and len(seen) == 5, seen


@pytest.mark.parametrize(("field", "when"), [("finishedAt", "1969-12-31T23:59:59+00:00"),
                                             ("finishedAt", "2400-06-01T00:00:00+00:00"),
                                             ("startedAt", "1900-01-01T00:00:00+00:00"),
                                             ("finishedAt", "2200-01-01T00:00:00+00:00")])
def test_intake_refuses_a_pass_time_a_wrong_clock_gave_at_its_field(story, field, when):
    """Issue 40: a host with a wrong clock is told at the field (422), not stored and sorted by a year-2400 time."""
    r = post(story, a_pass(1) | {field: when}, expect=422)
    [problem] = r.json()["issues"]
    [at] = problem["fields"]
    assert problem["code"] == "INVALID_INPUT" and at["field"] == field, problem
    assert "1970-01-01 and 2200-01-01 (UTC): the host's clock is wrong" in at["message"]
    assert story.get("/v1/hosts/web1").status_code == 404  # nothing stored
    post(story, a_pass(1) | {field: "1970-01-01T00:00:00+00:00", "startedAt": "1970-01-01T00:00:00+00:00",
                             "finishedAt": "1970-01-01T00:00:02+00:00"})  # the bound itself is a time

"""``datum agent --once`` processes against a real ``datum serve`` on loopback (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import re
import sqlite3

import httpx

from .conftest import Agent, Fleet


def _spooled(agent: Agent) -> list[int]:
    db = sqlite3.connect(agent.state)
    try:
        return [r[0] for r in db.execute("SELECT seq FROM agent_spool ORDER BY seq")]
    finally:
        db.close()


def test_once_fetches_the_effective_manifest_applies_it_and_reports(fleet: Fleet):
    operator = fleet.token("operator")
    agent = Agent(fleet, "web1", fleet.token("agent", "--host", "web1"))
    run = agent.once()
    assert run.code == 2, run.err
    assert (agent.root / "srv" / "index.html").read_text().startswith("hello from")  # rule vars reach the template
    assert run.err.count("\n") == 1 and "datum agent: pass" in run.err  # one log line per pass
    etag = fleet.get("/v1/hosts/web1/manifest", operator).headers["ETag"]
    row = fleet.get("/v1/hosts/web1", operator).json()
    assert row["state"] == "converged"
    report = row["report"]
    assert f'"{report["manifestDigest"]}"' == etag
    assert report["manifestOrigin"] == "server"
    assert report["passId"] and report["seq"] > 0
    assert _spooled(agent) == []  # delivered: nothing kept
    again = agent.once()
    assert again.code == 0, again.err  # 304: the kept manifest, unchanged, converged
    assert fleet.get("/v1/hosts/web1", operator).json()["report"]["seq"] == report["seq"] + 1


def test_an_unchanged_manifest_is_304(sqlite_fleet: Fleet):
    fleet = sqlite_fleet  # SQLite alone: what it tests is not in the store's dialect
    token = fleet.token("agent", "--host", "web1")
    first = fleet.get("/v1/hosts/web1/manifest", token)
    assert first.status_code == 200
    etag = first.headers["ETag"]
    body = first.json()
    assert [next(iter(r)) for r in body["manifest"]["resources"]] == ["Directory[/srv]", "File[/srv/index.html]"]
    assert body["files"] and f'"{body["digest"]}"' == etag
    second = fleet.get("/v1/hosts/web1/manifest", token, **{"If-None-Match": etag})
    assert second.status_code == 304 and second.headers["ETag"] == etag and second.content == b""
    assert fleet.get("/v1/hosts/web1/manifest", token, **{"If-None-Match": f'"x", W/{etag}'}).status_code == 304
    (fleet.manifests / "common.yaml").write_text("resources:\n  - Directory[/srv]:\n      mode: '0755'\n")
    changed = fleet.get("/v1/hosts/web1/manifest", token, **{"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["ETag"] != etag


def test_store_and_forward_across_an_outage_and_agent_restarts(fleet: Fleet):
    operator = fleet.token("operator")
    agent = Agent(fleet, "web1", fleet.token("agent", "--host", "web1"))
    assert agent.once().code == 2
    first = fleet.get("/v1/hosts/web1", operator).json()["report"]
    fleet.stop()
    down = [agent.once(), agent.once()]  # each a new process: an agent restart every time
    for run in down:
        assert run.code == 0, run.err
        assert "kept for later" in run.err and "cached" in run.err
    kept = _spooled(agent)
    assert kept == [first["seq"] + 1, first["seq"] + 2]
    fleet.start()
    up = agent.once()
    assert up.code == 0, up.err
    assert "delivered 3" in up.err
    assert _spooled(agent) == []
    row = fleet.get("/v1/hosts/web1", operator).json()
    assert row["report"]["seq"] == first["seq"] + 3 and row["state"] == "converged"
    cached = json.loads(
        sqlite3.connect(agent.state).execute("SELECT report FROM agent_reports").fetchone()[0]
    )
    assert cached["seq"] == first["seq"] + 3
    # The server ignores the same pass again, and an older one never replaces the newer.
    token = agent.token
    auth = {"Authorization": f"Bearer {token}"}
    same = httpx.post(fleet.url + "/v1/hosts/web1/passes", json=row["report"], headers=auth)
    assert same.status_code == 200 and same.headers["Datum-Pass"] == "duplicate"
    older = {**first, "passId": "00000000-0000-0000-0000-000000000000"}
    old = httpx.post(fleet.url + "/v1/hosts/web1/passes", json=older, headers=auth)
    assert old.status_code == 200 and old.headers["Datum-Pass"] == "older"
    assert fleet.get("/v1/hosts/web1", operator).json()["report"]["seq"] == first["seq"] + 3


def _local_report(agent: Agent) -> dict:
    db = sqlite3.connect(agent.state)
    try:
        return json.loads(db.execute("SELECT report FROM agent_reports").fetchone()[0])
    finally:
        db.close()


def test_a_pass_during_an_outage_says_it_ran_the_kept_manifest(sqlite_fleet: Fleet):
    fleet = sqlite_fleet
    agent = Agent(fleet, "web1", fleet.token("agent", "--host", "web1"))
    agent.once()
    digest = _local_report(agent)["manifestDigest"]
    fleet.stop()
    assert agent.once().code == 0
    during = _local_report(agent)
    assert during["manifestOrigin"].startswith("cached: cannot reach")
    assert "applied the manifest fetched at" in during["manifestOrigin"]
    assert during["manifestDigest"] == digest
    fleet.start()
    assert agent.once().code == 0
    assert _local_report(agent)["manifestOrigin"] == "server"


def test_the_agent_loop_runs_on_its_interval_and_stops_on_sigterm(sqlite_fleet: Fleet):
    import os
    import signal
    import subprocess
    import time

    from .conftest import DATUM

    fleet = sqlite_fleet
    agent = Agent(fleet, "web1", fleet.token("agent", "--host", "web1"))
    agent.once()  # writes the agent's files
    proc = subprocess.Popen(
        [*DATUM, "agent", "--server", fleet.url, "--token-file", str(agent.base / "token"),
         "--root", str(agent.root), "--state", str(agent.state), "--interval", "1s", "--splay", "0s",
         "--config", str(agent.base / "agent.toml")],
        stderr=subprocess.PIPE, text=True,
        env={**os.environ, "DATUM_HOME": str(agent.base / "home"), "DATUM_BOOT_ID_FILE": str(agent.base / "boot_id")},
    )
    seq = _local_report(agent)["seq"]
    deadline = time.monotonic() + 60
    while _local_report(agent)["seq"] < seq + 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    lines = proc.stderr.read().splitlines()
    assert len(lines) >= 2 and all(line.startswith("datum agent: pass") for line in lines)


def test_with_no_manifest_ever_the_host_reports_unknown_saying_why(sqlite_fleet: Fleet):
    fleet = sqlite_fleet
    operator = fleet.token("operator")
    agent = Agent(fleet, "lonely", fleet.token("agent", "--host", "lonely"))
    run = agent.once()
    assert run.code == 4, run.err
    row = fleet.get("/v1/hosts/lonely", operator).json()
    assert row["state"] == "unknown"
    assert "no manifest has ever been fetched" in row["reason"] and "no rule" in row["reason"]
    status = fleet.datum("status", "--state", str(agent.state), "--config", str(agent.base / "agent.toml"), "--json")
    assert json.loads(status.out)["state"] == "unknown"


def test_a_bound_token_speaks_for_its_host_only(sqlite_fleet: Fleet):
    fleet = sqlite_fleet  # SQLite alone: what it tests is not in the store's dialect
    web1 = fleet.token("agent", "--host", "web1")
    assert fleet.get("/v1/hosts/web1/manifest", web1).status_code == 200
    refused = fleet.get("/v1/hosts/web2/manifest", web1)
    assert refused.status_code == 403
    assert refused.json()["issues"][0]["action"] == "fleet:ReadManifest"
    report = {"host": "web2", "mode": "enforce", "state": "converged", "startedAt": "2026-11-30T00:00:00+00:00",
              "finishedAt": "2026-11-30T00:00:01+00:00", "durationSeconds": 1, "exitCode": 0}
    posted = httpx.post(fleet.url + "/v1/hosts/web2/passes", json=report, headers={"Authorization": f"Bearer {web1}"})
    assert posted.status_code == 403 and posted.json()["issues"][0]["action"] == "fleet:ReportPass"
    assert fleet.get("/v1/hosts", web1).status_code == 403  # an agent reads no host state
    # An agent on web2 holding web1's token: its pass runs nothing and is refused on delivery.
    impostor = Agent(fleet, "web2", web1)
    run = impostor.once()
    assert "403" in run.err


def test_node_rules_choose_manifests_by_facts_and_the_group_by_labels(sqlite_fleet: Fleet):
    fleet = sqlite_fleet  # SQLite alone: what it tests is not in the store's dialect
    nodes = fleet.manifests / "nodes.yaml"
    nodes.write_text(
        "labels:\n  db1: {role: tester}\n" + nodes.read_text() + "  - match: {labels: {role: tester}}\n    group: testers\n"
    )
    agent = Agent(fleet, "db1", fleet.token("agent", "--host", "db1"))
    (agent.root / "etc").mkdir(parents=True)
    (agent.root / "etc" / "os-release").write_text("ID=testos\nVERSION_ID=1\n")
    run = agent.once()
    assert run.code == 2, run.err
    assert (agent.root / "etc" / "testos.conf").read_text() == "testos\n"
    assert not (agent.root / "srv").exists()  # db1 is not web*
    # the server recorded the group its label's rule gives (its facts give manifests only)
    from prometheus_client.parser import text_string_to_metric_families

    scraped = fleet.get("/metrics", fleet.token("operator")).text
    hosts = {
        (s.labels["group"], s.labels["state"]): s.value
        for family in text_string_to_metric_families(scraped) for s in family.samples if s.name == "datum_fleet_hosts"
    }
    assert sum(v for (group, _state), v in hosts.items() if group == "testers") == 1
    assert sum(hosts.values()) == 1


ROLES = """\
labels:
  db1: {role: db}
nodes:
  - match: {name: "web*"}
    manifests: [web.yaml]
    vars: {greeting: hello}
    group: web
  - match: {labels: {role: db}}
    manifests: [db.yaml]
    vars: {greeting: db-only-greeting}
    group: db
  - match: {facts: {os_release.ID: dbos}}
    manifests: [testos.yaml]
"""
DB = """\
resources:
  - File[/etc/db.key]:
      content: "the db key\\n"
      sensitive: true
  - File[/srv/db.txt]:
      template: index.j2
"""


def _fleet_hosts(fleet: Fleet) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    scraped = fleet.get("/metrics", fleet.token("operator")).text
    by_group: dict[str, float] = {}
    for family in text_string_to_metric_families(scraped):
        for s in family.samples:
            if s.name == "datum_fleet_hosts":
                by_group[s.labels["group"]] = by_group.get(s.labels["group"], 0) + s.value
    return by_group


def test_a_host_claiming_another_roles_facts_gets_nothing_of_that_role(fleet: Fleet):
    """Facts are claims: web1, holding its own bound token, claims the db role's facts every way an agent can
    (its os-release, the manifest request's header, the lease body, the report's header) and gets the facts
    rule's manifests only: none of the db role's vars, sensitive file or group."""
    (fleet.manifests / "nodes.yaml").write_text(ROLES)
    (fleet.manifests / "db.yaml").write_text(DB)
    db1 = Agent(fleet, "db1", fleet.token("agent", "--host", "db1"))
    assert db1.once().code == 2  # the server's labels give db1 the role: the control
    assert (db1.root / "etc" / "db.key").read_text() == "the db key\n"
    assert (db1.root / "srv" / "db.txt").read_text().startswith("db-only-greeting")

    token = fleet.token("agent", "--host", "web1")
    web1 = Agent(fleet, "web1", token)
    (web1.root / "etc").mkdir(parents=True)
    (web1.root / "etc" / "os-release").write_text("ID=dbos\nVERSION_ID=1\n")
    run = web1.once()
    assert run.code == 2, run.err
    assert (web1.root / "etc" / "testos.conf").read_text() == "testos\n"  # the facts rule: manifests only
    assert (web1.root / "srv" / "index.html").read_text().startswith("hello from")  # its own role's vars
    assert not (web1.root / "etc" / "db.key").exists() and not (web1.root / "srv" / "db.txt").exists()

    claims = json.dumps({"os_release": {"ID": "dbos"}, "role": "db", "labels": {"role": "db"}, "group": "db"})
    bearer = {"Authorization": f"Bearer {token}"}
    served = httpx.get(fleet.url + "/v1/hosts/web1/manifest", headers=bearer | {"X-Datum-Facts": claims}, timeout=10)
    assert served.status_code == 200 and served.json()["manifests"] == ["web.yaml", "testos.yaml"]
    assert "db.key" not in served.text and "db-only-greeting" not in served.text
    lease = httpx.post(fleet.url + "/v1/hosts/web1/reboot-lease", json={"bootId": "b1", "facts": json.loads(claims)},
                       headers=bearer, timeout=10)
    assert lease.status_code == 200 and lease.json()["group"] == "web", lease.text
    httpx.delete(fleet.url + "/v1/hosts/web1/reboot-lease", headers=bearer, timeout=10)
    report = {"host": "web1", "mode": "enforce", "state": "converged", "startedAt": "2026-11-30T00:00:00+00:00",
              "finishedAt": "2026-11-30T00:00:01+00:00", "durationSeconds": 1, "exitCode": 0,
              "seq": 2**61, "passId": "claimed"}  # after the agent's
    posted = httpx.post(fleet.url + "/v1/hosts/web1/passes", json=report, headers=bearer | {"X-Datum-Facts": claims},
                        timeout=10)
    assert posted.status_code == 201, posted.text
    assert _fleet_hosts(fleet) == {"web": 1, "db": 1, "default": 0}  # the group recorded is its name's

    # a facts rule that would grant vars is refused: nodes.yaml names the rule and the line, nothing is served
    (fleet.manifests / "nodes.yaml").write_text(ROLES + "    vars: {greeting: claimed}\n")
    refused = httpx.get(fleet.url + "/v1/hosts/web1/manifest", headers=bearer, timeout=10)
    assert refused.status_code == 422
    (field,) = refused.json()["issues"][0]["fields"]
    assert field["field"] == "nodes.yaml: nodes[2].vars" and field["message"].endswith("(line 14)")


def test_an_include_cycle_or_duplicate_is_a_finding_served_as_422(sqlite_fleet: Fleet):
    fleet = sqlite_fleet
    (fleet.manifests / "common.yaml").write_text("include: [web.yaml]\nresources:\n  - File[/srv/index.html]:\n      content: x\n")
    answer = fleet.get("/v1/hosts/web1/manifest", fleet.token("agent", "--host", "web1"))
    assert answer.status_code == 422
    text = json.dumps(answer.json())
    assert "include cycle: web.yaml -> common.yaml -> web.yaml" in text
    assert "File[/srv/index.html] in web.yaml duplicates the one in common.yaml" in text


def test_sigterm_during_a_pass_stops_after_the_resource_and_the_report_is_still_delivered(sqlite_fleet: Fleet):
    import signal
    import time

    fleet = sqlite_fleet
    (fleet.manifests / "slow.yaml").write_text(
        "resources:\n" + "".join(f"  - Exec[step{i}]:\n      command: 'touch step{i}.ran; sleep 0.5'\n" for i in range(8))
    )
    (fleet.manifests / "nodes.yaml").write_text(
        (fleet.manifests / "nodes.yaml").read_text() + "  - match: {name: slow1}\n    manifests: [slow.yaml]\n"
    )
    operator = fleet.token("operator")
    agent = Agent(fleet, "slow1", fleet.token("agent", "--host", "slow1"))
    agent.once()  # the agent's files; a whole pass
    for ran in agent.root.glob("step*.ran"):
        ran.unlink()
    proc = agent.start()
    deadline = time.monotonic() + 60  # inside the pass: the manifest fetched, two Execs begun (any load)
    while not (agent.root / "step1.ran").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(30)
    assert code & 4, proc.stderr.read()
    row = fleet.get("/v1/hosts/slow1", operator).json()
    assert row["state"] == "unknown" and row["report"]["incomplete"] is True
    assert "stopped by SIGTERM" in row["reason"]
    assert _spooled(agent) == []


def test_a_second_agent_on_one_state_file_never_removes_the_manifest_a_running_pass_reads(sqlite_fleet: Fleet):
    """Two ``datum agent --once`` on one state file, served different digests: the second, finding the
    pass lock held, unpacks and removes nothing, so the first pass reads its sources to the end."""
    import time
    from pathlib import Path

    fleet = sqlite_fleet
    m = fleet.manifests
    (m / "race.yaml").write_text(
        "resources:\n"
        "  - Exec[hold]:\n      command: 'touch held; while [ ! -e go ]; do sleep 0.05; done'\n"
        "  - Directory[/srv]: {}\n"
        "  - File[/srv/data.txt]:\n      source: data.txt\n"
    )
    (m / "data.txt").write_text("first\n")
    (m / "nodes.yaml").write_text((m / "nodes.yaml").read_text() + "  - match: {name: race1}\n    manifests: [race.yaml]\n")
    agent = Agent(fleet, "race1", fleet.token("agent", "--host", "race1"), settings='lock_wait = "1s"')
    first = agent.start()
    try:
        deadline = time.monotonic() + 60  # the first pass holds the lock, its manifest unpacked
        while not (agent.root / "held").exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (agent.root / "held").exists(), first.stderr.read() if first.poll() is not None else "no pass began"
        base = Path(f"{agent.state}.manifest")
        [in_use] = list(base.iterdir())
        (m / "data.txt").write_text("second\n")  # another digest for the second agent
        second = agent.once()
        assert second.code == 69 and "another pass is running" in second.err, second.err
        assert list(base.iterdir()) == [in_use] and (in_use / "data.txt").read_text() == "first\n"
        (agent.root / "go").touch()
        assert first.wait(60) == 2, first.stderr.read()
        assert (agent.root / "srv" / "data.txt").read_text() == "first\n"
        assert _local_report(agent)["state"] == "converged"
    finally:  # never left waiting on its marker
        (agent.root / "go").touch()
        if first.poll() is None:
            first.kill()
            first.wait(30)
    outside = fleet.base / "outside"  # links planted among the manifests: removed, never followed
    outside.mkdir()
    (outside / "keep").write_text("precious")
    (base / "planted").symlink_to(outside, target_is_directory=True)
    (base / ".planted.tmp1").symlink_to(outside / "keep")
    third = agent.once()  # the lock free: the second digest applied, the first's directory removed
    assert third.code == 2, third.err
    assert (agent.root / "srv" / "data.txt").read_text() == "second\n"
    assert [p.name for p in base.iterdir()] == [_local_report(agent)["manifestDigest"].replace(":", "-")]
    assert not in_use.exists()
    assert [p.name for p in outside.iterdir()] == ["keep"] and (outside / "keep").read_text() == "precious"


def test_a_host_whose_agent_fell_silent_reads_unknown_saying_how_stale(sqlite_fleet: Fleet):
    fleet = sqlite_fleet
    operator = fleet.token("operator")
    token = fleet.token("agent", "--host", "quiet")
    report = {"host": "quiet", "mode": "enforce", "state": "converged", "startedAt": "2026-11-29T00:00:00+00:00",
              "finishedAt": "2026-11-29T00:00:01+00:00", "durationSeconds": 1, "exitCode": 0,
              "intervalSeconds": 1800, "seq": 1, "passId": "p1"}
    posted = httpx.post(fleet.url + "/v1/hosts/quiet/passes", json=report, headers={"Authorization": f"Bearer {token}"})
    assert posted.status_code == 201, posted.text
    row = fleet.get("/v1/hosts/quiet", operator).json()
    assert row["state"] == "unknown" and row["stale"] is True
    assert row["reason"].startswith("stale: the last report is ") and "more than 3 x its 30m interval" in row["reason"]
    listing = fleet.get("/v1/hosts", operator).json()
    listed = {h["host"]: h for h in listing["hosts"]}
    assert listed["quiet"]["state"] == "unknown" and listed["quiet"]["stale"] is True
    aged = re.compile(r"\d+h\d+m old")  # read a moment apart: a minute may have turned between the two
    assert aged.sub("N old", listed["quiet"]["reason"]) == aged.sub("N old", row["reason"]), (listed, row)
    assert listing["counts"]["unknown"] == 1 and listing["counts"]["converged"] == 0
    only = fleet.get("/v1/hosts?state=unknown", operator).json()["hosts"]
    assert [h["host"] for h in only] == ["quiet"]
    assert fleet.get("/v1/hosts?state=converged", operator).json()["hosts"] == []


def _templated(fleet: Fleet) -> None:
    """index.j2 includes a partial (which extends a base) and imports a macro file, in subdirectories."""
    m = fleet.manifests
    (m / "index.j2").write_text(
        '{% import "lib/macros.j2" as lib %}{{ lib.greet(greeting) }}\n{% include "partials/footer.j2" %}'
    )
    (m / "lib").mkdir()
    (m / "lib" / "macros.j2").write_text("{% macro greet(word) %}{{ word | upper }}, world{% endmacro %}")
    (m / "partials").mkdir()
    (m / "partials" / "footer.j2").write_text('{% extends "partials/base.j2" %}{% block body %}footer v1{% endblock %}')
    (m / "partials" / "base.j2").write_text("-- {% block body %}{% endblock %} --\n")


def test_files_a_template_includes_imports_and_extends_are_served_and_applied(sqlite_fleet: Fleet):
    fleet = sqlite_fleet
    _templated(fleet)
    token = fleet.token("agent", "--host", "web1")
    served = fleet.get("/v1/hosts/web1/manifest", token)
    assert served.status_code == 200, served.text
    assert set(served.json()["files"]) == {"index.j2", "lib/macros.j2", "partials/footer.j2", "partials/base.j2"}
    agent = Agent(fleet, "web1", token)
    run = agent.once()
    assert run.code == 2, run.err
    index = agent.root / "srv" / "index.html"
    assert index.read_text() == "HELLO, world\n-- footer v1 --\n"
    # An edit of the included file alone is another manifest: another ETag, and the agent applies it.
    etag = served.headers["ETag"]
    (fleet.manifests / "partials" / "footer.j2").write_text(
        '{% extends "partials/base.j2" %}{% block body %}footer v2, changed{% endblock %}'
    )
    changed = fleet.get("/v1/hosts/web1/manifest", token, **{"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["ETag"] != etag
    run = agent.once()
    assert run.code == 2, run.err
    assert index.read_text() == "HELLO, world\n-- footer v2, changed --\n"
    assert _local_report(agent)["manifestDigest"] == changed.json()["digest"]
    assert agent.once().code == 0  # 304: converged on it


def test_a_template_loading_a_file_outside_the_directory_or_by_an_expression_is_refused(sqlite_fleet: Fleet):
    fleet = sqlite_fleet
    m = fleet.manifests
    (fleet.base / "secret.j2").write_text("the server's secret\n")
    (m / "link.j2").symlink_to(fleet.base / "secret.j2")
    token = fleet.token("agent", "--host", "web1")
    for text, why in [
        ('{% include "../secret.j2" %}', "../secret.j2 is outside the manifest's directory"),
        ('{% import "link.j2" as s %}', "link.j2 is outside the manifest's directory"),
        ("{% include greeting ~ '.j2' %}", "cannot be resolved statically"),
    ]:
        (m / "index.j2").write_text(text)
        answer = fleet.get("/v1/hosts/web1/manifest", token)
        assert answer.status_code == 422, answer.text
        body = json.dumps(answer.json())
        assert "template index.j2" in body and why in body
        assert "secret" not in answer.json().get("files", {})
        done = fleet.datum("validate", "--fleet", str(m))
        assert done.code == 65 and "template index.j2" in done.out + done.err and why in done.out + done.err
    agent = Agent(fleet, "web1", token)
    run = agent.once()
    assert run.code == 4 and "no manifest has ever been fetched" in run.err + _local_report(agent)["reason"]
    assert not (agent.root / "srv" / "index.html").exists()


def test_the_agent_refuses_a_served_manifest_without_the_files_its_templates_load(tmp_path):
    import base64

    import pytest

    from datum.agent.fetch import materialize
    from datum.core.findings import Problem

    body = {
        "digest": "sha256:" + "0" * 64,
        "manifest": {"resources": [{"File[/x]": {"template": "t.j2"}}]},
        "files": {"t.j2": base64.b64encode(b'{% include "gone.j2" %}').decode()},
    }
    with pytest.raises(Problem) as caught:
        materialize(json.dumps(body).encode(), tmp_path)
    assert "template t.j2: loads gone.j2" in caught.value.findings[0].message


def _served(digest: str = "sha256:" + "1" * 64, files: dict | None = None) -> bytes:
    manifest = {"resources": [{"File[/x]": {"content": "x\n"}}]}
    return json.dumps({"digest": digest, "manifest": manifest, "files": files or {}}).encode()


def test_a_hostile_served_manifest_writes_and_removes_nothing_outside_its_directory(tmp_path):
    """A digest or file name that climbs out, or links planted under the manifests' directory:
    refused or removed as links, and nothing they point at is touched."""
    import base64

    import pytest

    from datum.agent.fetch import materialize
    from datum.core.findings import Problem

    base, outside = tmp_path / "state.db.manifest", tmp_path / "outside"
    base.mkdir()
    outside.mkdir()
    (outside / "keep").write_text("precious")
    for digest in ("../outside", "sha256:../../x", "/", ".hidden", "sha256:" + "g" * 64):
        with pytest.raises(Problem, match="digest is not one"):
            materialize(_served(digest), base)
    for name in ("../escape", "/abs/path", "a/../../escape"):
        with pytest.raises(Problem, match="names a file outside it"):
            materialize(_served(files={name: base64.b64encode(b"x").decode()}), base)
    with pytest.raises(Problem, match="is not base64"):
        materialize(_served(files={"t.j2": "%%%"}), base)
    # A file and a directory of one name, or the manifest's directory itself: a finding, not a crash.
    with pytest.raises(Problem, match="cannot be written under"):
        materialize(_served(files={"a": "eA==", "a/b": "eA=="}), base)
    for name in (".", "", "sub/.."):
        with pytest.raises(Problem, match="names a file outside it"):
            materialize(_served(files={name: "eA=="}), base)
    assert not (tmp_path / "escape").exists() and not any(p.name.startswith(".") for p in base.iterdir())

    # Links planted under the directory: an old entry, a dot entry and the digest's own name; a stale partial.
    (base / "old-link").symlink_to(outside, target_is_directory=True)
    (base / ".hidden-link").symlink_to(outside / "keep")
    (base / ".sha256-2.tmp1").mkdir()
    (base / ("sha256-" + "1" * 64)).symlink_to(outside, target_is_directory=True)
    manifest, digest = materialize(_served(), base)
    assert digest == "sha256:" + "1" * 64
    where = base / ("sha256-" + "1" * 64)
    assert where.is_dir() and not where.is_symlink() and (where / "manifest.json").is_file()
    assert sorted(p.name for p in base.iterdir()) == [where.name]  # the links removed, not followed
    assert (outside / "keep").read_text() == "precious" and sorted(p.name for p in outside.iterdir()) == ["keep"]

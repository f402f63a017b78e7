"""Node rules, composition with include, ``datum validate --fleet``, staleness and the systemd unit."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from datum.core.findings import Problem
from datum.fleet.effective import check_fleet, effective
from datum.fleet.nodes import classify, load_rules
from datum.fleet.stale import stale

DATUM = [sys.executable, "-c", "from datum.cli.main import main; main()"]
ROOT = Path(__file__).resolve().parents[2]


def _fleet(tmp_path: Path, nodes: str, **files: str) -> Path:
    (tmp_path / "nodes.yaml").write_text(nodes)
    for name, text in files.items():
        path = tmp_path / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


RULES = """\
labels:
  web2: {size: big}
nodes:
  - match: {name: "web*"}
    manifests: [web.yaml]
    vars: {port: 80}
  - match: {facts: {os_release.ID: "deb*", cpu_count: "4"}}
    manifests: [debian.yaml]
  - match: {name: "db*", facts: {os_release.ID: debian}}
    manifests: [db.yaml]
  - match: {labels: {size: "b*"}}
    manifests: [web.yaml]
    vars: {port: 8080}
"""
ONE = "resources:\n  - File[/{name}]:\n      content: x\n"


@pytest.mark.parametrize(
    ("host", "facts", "manifests", "port"),
    [
        ("web1", {}, ["web.yaml"], 80),
        ("web2", {}, ["web.yaml"], 8080),  # its label's rule, later: its vars win
        ("web1", {"os_release": {"ID": "debian"}, "cpu_count": 4}, ["web.yaml", "debian.yaml"], 80),
        ("web1", {"size": "big"}, ["web.yaml"], 80),  # a fact is not a label
        ("db1", {"os_release": {"ID": "debian"}, "cpu_count": 2}, ["db.yaml"], None),
        ("db1", {"os_release": {"ID": "fedora"}}, [], None),
        ("mail", {"os_release": {"ID": "debian"}, "cpu_count": 4}, ["debian.yaml"], None),  # facts give no vars
    ],
)
def test_rules_match_by_name_labels_and_facts_in_order(tmp_path, host, facts, manifests, port):
    d = _fleet(tmp_path, RULES, **{f"{n}.yaml": ONE.format(name=n) for n in ("web", "debian", "db")})
    chosen, variables, _ = classify(load_rules(d), host, facts)
    assert chosen == manifests
    assert variables.get("port") == port


def test_a_rule_file_with_mistakes_lists_every_finding(tmp_path):
    d = _fleet(tmp_path, "nodes:\n  - manifests: [missing.yaml]\n    colour: red\n  - match: {name: x, age: 3}\n")
    with pytest.raises(Problem) as caught:
        load_rules(d)
    text = str(caught.value.to_json())
    assert "nodes[0].match" in text and "nodes[0].colour" in text and "no manifest missing.yaml" in text
    assert "nodes[1].match.age" in text and "nodes[1].manifests" in text


def test_the_effective_manifest_composes_includes_and_carries_a_stable_digest(tmp_path):
    d = _fleet(
        tmp_path,
        "nodes:\n  - match: {name: '*'}\n    manifests: [top.yaml]\n    vars: {who: fleet}\n",
        **{
            "top.yaml": "include: [roles/web.yaml]\nresources:\n  - File[/a]:\n      content: a\n",
            "roles__web.yaml": "resources:\n  - File[/b]:\n      template: b.j2\n",
            "roles__b.j2": "{{ who }}\n",
        },
    )
    first = effective(d, "h1", {})
    assert first.digest == effective(d, "h1", {}).digest
    import json

    body = json.loads(first.body)
    ids = [next(iter(r)) for r in body["manifest"]["resources"]]
    assert ids == ["File[/b]", "File[/a]"]  # included first
    b = body["manifest"]["resources"][0]["File[/b]"]
    assert b["template"] == "roles/b.j2" and b["vars"] == {"who": "fleet"}
    assert set(body["files"]) == {"roles/b.j2"}
    (d / "roles" / "b.j2").write_text("changed\n")
    assert effective(d, "h1", {}).digest != first.digest  # a template is part of the version


def test_validate_fleet_reports_cycles_and_duplicates_naming_both_files(tmp_path):
    d = _fleet(
        tmp_path,
        "nodes:\n  - match: {name: '*'}\n    manifests: [a.yaml, b.yaml]\n",
        **{
            "a.yaml": "include: [c.yaml]\nresources:\n  - File[/x]:\n      content: a\n",
            "c.yaml": "include: [a.yaml]\nresources: []\n",
            "b.yaml": "resources:\n  - File[/x]:\n      content: b\n",
        },
    )
    with pytest.raises(Problem):
        check_fleet(d)
    done = subprocess.run([*DATUM, "validate", "--fleet", str(d)], capture_output=True, text=True, check=False)
    assert done.returncode == 65
    assert "include cycle: a.yaml -> c.yaml -> a.yaml" in done.stderr
    assert "File[/x] in b.yaml duplicates the one in a.yaml" in done.stderr
    (d / "c.yaml").write_text("resources: []\n")
    (d / "b.yaml").write_text("resources:\n  - File[/y]:\n      content: b\n")
    ok = subprocess.run([*DATUM, "validate", "--fleet", str(d)], capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and "1 rules, 2 manifests" in ok.stdout, ok.stderr


def test_include_works_for_datum_apply_too(tmp_path):
    (tmp_path / "m.yaml").write_text("include: [sub/common.yaml]\nresources:\n  - File[/a]:\n      content: a\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "common.yaml").write_text("resources:\n  - File[/b]:\n      source: b.txt\n")
    (tmp_path / "sub" / "b.txt").write_text("bee\n")
    root = tmp_path / "root"
    root.mkdir()
    done = subprocess.run(
        [*DATUM, "apply", str(tmp_path / "m.yaml"), "--root", str(root), "--state", str(tmp_path / "s.db")],
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert (root / "b").read_text() == "bee\n" and (root / "a").read_text() == "a"
    # An edit of an included file is seen at once (the validated-manifest cache keys one file only).
    (tmp_path / "sub" / "common.yaml").write_text("resources:\n  - File[/b]:\n      content: changed\n")
    again = subprocess.run(
        [*DATUM, "apply", str(tmp_path / "m.yaml"), "--root", str(root), "--state", str(tmp_path / "s.db")],
        capture_output=True, text=True, check=False,
    )
    assert again.returncode == 2, again.stdout + again.stderr
    assert (root / "b").read_text() == "changed"


def _row(age: timedelta, interval: float | None) -> dict:
    report = {"state": "converged"} | ({"intervalSeconds": interval} if interval else {})
    return {"host": "h", "state": "converged", "reason": None,
            "finishedAt": datetime.now(UTC) - age, "report": report}


@pytest.mark.parametrize(
    ("age", "interval", "state"),
    [
        (timedelta(minutes=80), 1800.0, "converged"),  # under 3 intervals
        (timedelta(minutes=125), 1800.0, "unknown"),  # over 3 intervals
        (timedelta(days=9), None, "converged"),  # datum apply: no schedule to miss
    ],
)
def test_a_host_silent_for_a_few_intervals_reads_unknown_saying_how_stale(age, interval, state):
    row = stale(_row(age, interval), 3)
    assert row["state"] == state and row.get("stale", False) == (state == "unknown")
    if state == "unknown":
        assert row["reason"].startswith("stale: the last report is 2h05m old, more than 3 x its 30m interval")


def test_the_printed_systemd_unit_is_the_shipped_one():
    done = subprocess.run([*DATUM, "agent", "--print-systemd-unit"], capture_output=True, text=True, check=False)
    assert done.returncode == 0
    assert done.stdout == (ROOT / "contrib" / "systemd" / "datum-agent.service").read_text()
    # enrollment first: the host's key, the server and the pin it enrolled with; no token file to copy
    assert "ExecStart=/usr/bin/datum agent --interval ${DATUM_INTERVAL} --splay ${DATUM_SPLAY}\n" in done.stdout
    assert "ExecReload=/bin/kill -HUP $MAINPID" in done.stdout  # systemctl reload: the SIGHUP re-read
    assert (ROOT / "contrib" / "systemd" / "datum-agent.service").is_symlink()  # one file, packaged


def test_the_agent_refuses_a_server_that_is_not_a_url_and_warns_of_a_readable_token(tmp_path):
    token = tmp_path / "token"
    token.write_text("datum_x\n")
    token.chmod(0o644)
    bad = subprocess.run([*DATUM, "agent", "--server", "ftp://x", "--token-file", str(token), "--once"],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 64 and "not an http" in bad.stderr
    root = tmp_path / "root"
    root.mkdir()
    run = subprocess.run(
        [*DATUM, "agent", "--server", "http://127.0.0.1:9", "--token-file", str(token), "--once",
         "--root", str(root), "--state", str(tmp_path / "agent.db")],
        capture_output=True, text=True, check=False, env={**os.environ, "DATUM_HOME": str(tmp_path)},
    )
    assert "readable by every user" in run.stderr and "datum_x" not in run.stderr + run.stdout
    assert run.returncode == 4 and "no manifest has ever been fetched: cannot reach" in run.stderr


def test_the_effective_manifest_carries_every_file_its_templates_load_and_only_those(tmp_path):
    import base64
    import json

    d = _fleet(
        tmp_path,
        "nodes:\n  - match: {name: '*'}\n    manifests: [roles/web.yaml]\n",
        **{
            "roles__web.yaml": "resources:\n  - File[/b]:\n      template: b.j2\n",
            # names are the loader's, from the fleet directory: roles/b.j2 includes inc/x.j2
            "roles__b.j2": '{% include "inc/./x.j2" %}{% include "none.j2" ignore missing %}'
            '{% include ["gone.j2", "inc/alt.j2"] %}{% from "inc/m.j2" import f %}{{ f() }}',
            "inc__x.j2": '{% include "inc/m.j2" %}',  # loaded twice, sent once
            "inc__alt.j2": "alt",
            "inc__m.j2": "{% macro f() %}m{% endmacro %}",
            "inc__unused.j2": "not loaded, not sent",
        },
    )
    body = json.loads(effective(d, "h", {}).body)
    assert sorted(body["files"]) == ["inc/alt.j2", "inc/m.j2", "inc/x.j2", "roles/b.j2"]
    assert base64.b64decode(body["files"]["inc/alt.j2"]) == b"alt"
    assert check_fleet(d) == (1, 1)
    (d / "inc" / "m.j2").write_text("{% macro f() %}{{ x {% endmacro %}")
    with pytest.raises(Problem) as caught:
        check_fleet(d)
    text = json.dumps(caught.value.to_json())
    assert "nodes[0]: template inc/m.j2" in text and "line 1" in text

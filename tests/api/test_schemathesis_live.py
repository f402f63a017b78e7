"""schemathesis with every check (``--checks all``) against a real ``datum serve`` on loopback finds no failure.

Small enough for the suite (a few examples per operation, every phase: coverage, fuzzing, stateful);
``./scripts/schemathesis`` runs it bigger, on SQLite or PostgreSQL. What it runs is
``schemathesis_run.py``; what the document cannot say and the hooks tell it, ``schemathesis_hooks.py``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from datum.host.report import MAX_INTERVAL

from .schemathesis_run import CONFIG, KEPT_PASS, populated, run
from .story import build_story, pass_report, serving


def _answered(log: str, method: str, path: str) -> set[int]:
    """The statuses ``datum serve``'s access log shows for ``method`` on paths starting with ``path``."""
    return {int(s) for s in re.findall(rf'"{method} {re.escape(path)}[^"]*" (\d{{3}})', log)}


def test_schemathesis_with_every_check_finds_no_failure(tmp_path):
    cfg, token = populated(tmp_path)
    with serving(cfg, tmp_path / "serve.log") as base:
        done = run(base, token, examples=5, seed=1, cwd=tmp_path, cfg=cfg)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "No issues found" in out and "⚠️" not in out, out  # no failure, no warning
    for phase in ("Coverage", "Fuzzing", "Stateful"):  # every phase ran and passed
        assert f"✅ {phase}" in out, out
    # The new routes reached their handlers, not only their refusals: the audit log read (its rows there:
    # the tokens made, the refusals of the run), an operator's lease clear dropping a lease and keeping a live one.
    log = (tmp_path / "serve.log").read_text()
    audit, clear = _answered(log, "GET", "/v1/audit"), _answered(log, "DELETE", "/v1/reboots/")
    assert {200, 422} <= audit and {200, 409, 422} <= clear, (audit, clear)
    assert f'pass = "{KEPT_PASS}"' in CONFIG.read_text()  # the kept pass the configuration names is the one stored


@pytest.mark.postgres
def test_the_longest_interval_an_agent_can_have_does_not_overflow_the_stale_rule(tmp_path, pg_database):
    """schemathesis found it on PostgreSQL: a report with ``intervalSeconds`` near the largest float was stored,
    and every listing after answered 503 (``interval x stale_after`` overflowed). Now the interval is bounded
    by what an agent can be given, and that bound is listed on PostgreSQL."""
    story = build_story(tmp_path, pg_database)
    now = datetime.now(UTC).isoformat()
    longest = pass_report() | {"finishedAt": now, "intervalSeconds": MAX_INTERVAL}
    assert story.client.post("/v1/hosts/web1/passes", json=longest, headers=story.agent("web1")).status_code == 201
    beyond = pass_report("web2") | {"intervalSeconds": 1.6e308}
    r = story.client.post("/v1/hosts/web2/passes", json=beyond, headers=story.agent("web2"))
    assert r.status_code == 422 and r.json()["issues"][0]["fields"][0]["field"] == "intervalSeconds"
    listing = story.get("/v1/hosts")
    assert listing.status_code == 200, listing.text
    assert [h["host"] for h in listing.json()["hosts"]] == ["web1"]
    assert story.get("/metrics").status_code == 200
    story.client.close()
    story.store.dispose()


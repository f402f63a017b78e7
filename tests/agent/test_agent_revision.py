"""A real ``datum agent --once`` against a real ``datum serve`` (SQLite and PostgreSQL) reports the revision of
the fleet's manifests it ran (``Datum-Revision``), and ``datum rollout status`` counts it there. On SQLite: the
revision counts on both stores are tested in process (tests/fleet, tests/api/test_rollouts.py)."""

from __future__ import annotations

import json

from .conftest import Agent, Fleet


def _status(fleet: Fleet) -> dict:  # type: ignore[type-arg]
    run = fleet.datum("rollout", "status", "--json", "--config", str(fleet.server_config))
    assert run.code == 0, run.err
    return json.loads(run.out)  # type: ignore[no-any-return]


def test_the_agent_reports_the_revision_it_ran_and_rollout_status_counts_it(sqlite_fleet: Fleet):
    fleet = sqlite_fleet
    operator = fleet.token("operator")
    agent = Agent(fleet, "web1", fleet.token("agent", "--host", "web1"))
    assert agent.once().code == 2
    served = fleet.get("/v1/hosts/web1/manifest", operator).headers["Datum-Revision"]
    assert served.startswith("sha256:")
    assert fleet.get("/v1/hosts/web1", operator).json()["report"]["revision"] == served
    status = _status(fleet)
    assert status["current"] == served
    assert [(r["id"], r["hosts"], r["converged"], r["failed"]) for r in status["revisions"]] == [(served, 1, 1, 0)]

    (fleet.manifests / "common.yaml").write_text("resources:\n  - Directory[/srv]:\n      mode: '0750'\n")
    assert agent.once().code == 2  # the new revision: a change
    new = fleet.get("/v1/revisions", operator).json()
    assert new["current"] != served
    assert [(r["id"], r["hosts"]) for r in new["revisions"]] == [(new["current"], 1)]  # web1 left the old one
    assert fleet.get("/v1/hosts/web1", operator).json()["report"]["revision"] == new["current"]
    table = fleet.datum("rollout", "status", "--config", str(fleet.server_config))
    assert table.code == 0 and new["current"] in table.out and "current" in table.out, table.err

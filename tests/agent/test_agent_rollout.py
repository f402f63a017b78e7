"""Staged rollouts with real ``datum agent --once`` processes (five hosts, their own roots) against a real
``datum serve`` on loopback, on PostgreSQL (issue 24 item 4, its rollout half): a good revision goes
through every wave; a bad one fails on the canary, halts, and reaches no one else; abort returns the canary."""

from __future__ import annotations

import json
import time

import pytest

from .conftest import Agent, Fleet

# PostgreSQL alone, the store a fleet's replicas share: the same decisions on SQLite are tested in process
# (tests/api/test_rollouts.py, both stores); these real-agent runs are the suite's slowest (about 25 s each).
pytestmark = pytest.mark.parametrize(
    "store_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)

HOSTS = ["web1", "web2", "web3", "web4", "web5"]
ROLLOUT = '[fleet.rollout]\ncanary = ["web1"]\nwaves = ["50%", "100%"]\nsoak = "1s"\nmax_failed = "0%"\n'


@pytest.fixture
def rolling(fleet: Fleet) -> Fleet:
    fleet.stop()
    fleet.server_config.write_text(fleet.server_config.read_text() + ROLLOUT)
    fleet.start()
    return fleet


def _agents(fleet: Fleet) -> list[Agent]:
    return [Agent(fleet, h, fleet.token("agent", "--host", h)) for h in HOSTS]


def _run(agents: list[Agent]) -> None:
    for a in agents:
        run = a.once()
        assert run.code in (0, 2, 4), run.err


def _rollout(fleet: Fleet, token: str) -> dict:  # type: ignore[type-arg]
    answer = fleet.get("/v1/rollouts", token)
    assert answer.status_code == 200, answer.text
    return answer.json()["rollouts"][0]  # type: ignore[no-any-return]


def _ran(fleet: Fleet, token: str) -> dict[str, str]:
    return {h: fleet.get(f"/v1/hosts/{h}", token).json()["report"].get("revision") for h in HOSTS}


def _until(fleet: Fleet, token: str, what: str, value: object, within: float = 20) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + within
    while True:
        ro = _rollout(fleet, token)
        if ro[what] == value:
            return ro
        assert time.monotonic() < deadline, ro
        time.sleep(0.2)


def test_a_good_revision_reaches_every_host_wave_by_wave(rolling: Fleet):
    fleet, operator = rolling, rolling.token("operator")
    agents = _agents(fleet)
    _run(agents)
    first = _rollout(fleet, operator)
    assert first["state"] == "done"
    (fleet.manifests / "common.yaml").write_text("resources:\n  - Directory[/srv]:\n      mode: '0750'\n")
    _run(agents[1:] + agents[:1])  # the canary last: once it converged, the soak (1 s) may release wave 1
    ro = _rollout(fleet, operator)
    assert ro["state"] == "rolling" and ro["previous"] == first["revision"]
    ran = _ran(fleet, operator)
    assert ran["web1"] == ro["revision"]
    assert [h for h in HOSTS[1:] if ran[h] != first["revision"]] == []  # held back
    for wave in (1, 2):
        _until(fleet, operator, "wave", wave)  # the server's own check ends the soak
        _run(agents)
    done = _until(fleet, operator, "state", "done")
    assert set(_ran(fleet, operator).values()) == {done["revision"]}
    status = fleet.datum("rollout", "status", "--json", "--config", str(fleet.server_config))
    assert status.code == 0, status.err
    assert json.loads(status.out)["rollout"]["state"] == "done"


def test_a_bad_revision_fails_on_the_canary_halts_and_abort_returns_it(rolling: Fleet):
    fleet, operator = rolling, rolling.token("operator")
    agents = _agents(fleet)
    _run(agents)
    first = _rollout(fleet, operator)["revision"]
    (fleet.manifests / "common.yaml").write_text(
        "resources:\n  - Directory[/srv]: {}\n  - Exec[migrate]:\n      command: 'echo broken >&2; exit 3'\n"
    )
    _run(agents)
    ro = _until(fleet, operator, "state", "halted")
    assert [f["host"] for f in ro["failed"]] == ["web1"]
    for _ in range(2):  # more cycles: nobody else is served it
        time.sleep(1.2)
        _run(agents)
    ran = _ran(fleet, operator)
    assert ran["web1"] == ro["revision"] and all(ran[h] == first for h in HOSTS[1:]), ran
    table = fleet.datum("rollout", "status", "--config", str(fleet.server_config))
    assert table.code == 0 and "halted" in table.out and "web1" in table.out, table.out
    (fleet.base / "operator.token").write_text(operator + "\n")
    viewer = fleet.token("viewer")
    (fleet.base / "viewer.token").write_text(viewer + "\n")
    refused = fleet.datum("rollout", "abort", "--server", fleet.url, "--token-file", str(fleet.base / "viewer.token"))
    assert refused.code != 0 and "fleet:ManageRollout" in refused.err + refused.out
    aborted = fleet.datum("rollout", "abort", "--server", fleet.url, "--token-file", str(fleet.base / "operator.token"))
    assert aborted.code == 0, aborted.err
    assert "web1" in aborted.out and "aborted" in aborted.out
    _run(agents[:1])
    assert _ran(fleet, operator)["web1"] == first

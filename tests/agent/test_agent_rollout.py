"""Staged rollouts with real ``datum agent --once`` processes (five hosts, their own roots) against real
``datum serve`` processes on loopback (issue 24 item 4, its rollout half): a good revision goes through every
wave; a bad one fails on the canaries, halts, and reaches no one else; abort returns the canaries.

On SQLite against one server; on PostgreSQL against two replicas of the same store (``Fleet(replicas=2)``):
the hosts are spread across the replicas and each moves to the other one every time it runs; each host's
report is read from the replica it did not report to, the rollout from (and the abort sent to) the one the
host that ran last did not report to; the soak of wave 1 is ended by replica 0's own check and wave 2's by
replica 1's, the other stopped meanwhile (when the soak had not ended before the stop: any replica may release
a wave); and each decision (a start, a wave, a halt) is made once, by one replica. What one replica decided is
what the other serves and says.

The agents of one cycle run at once (``Agent.start``), as a fleet's do.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .conftest import Agent, Fleet, _fleet

pytestmark = pytest.mark.parametrize(
    ("store_url", "replicas"),
    [
        pytest.param("sqlite", 1, id="sqlite-1-server"),
        pytest.param("postgresql", 2, marks=pytest.mark.postgres, id="postgresql-2-replicas"),
    ],
    indirect=["store_url"],
)

HOSTS = ["web1", "web2", "web3", "web4", "web5"]
CANARIES = ["web1", "web2"]
OTHERS = HOSTS[2:]
# waves: the two canaries; then ceil(50%) of the three others, 2; then the last one
ROLLOUT = '[fleet.rollout]\ncanary = ["web1", "web2"]\nwaves = ["50%", "100%"]\nsoak = "1s"\nmax_failed = "0%"\n'


# what ``datum.fleet.rollouts.machine`` logs when its replica started a rollout (inserted its row) or moved it
DECIDED = re.compile(r"rollout (\d+) of revision (\S+): (.+)$")


def decided(fleet: Fleet, expected: list[str], within: float = 5) -> dict[str, list[int]]:
    """Each decision the replicas logged (``"2 rolling, wave 1 of 2"``, ``"2 halted, wave 0 of 2"``: the rollout,
    its state, its wave; a start ``"2 rolling (from ...)"``) and the replicas that logged it, once ``expected``
    all appear (a line is written just after its transaction commits)."""
    deadline = time.monotonic() + within
    while True:
        found: dict[str, list[int]] = {}
        for r in range(fleet.replicas):
            for line in fleet.log_of(r).read_text().splitlines():
                if m := DECIDED.search(line):
                    found.setdefault(f"{m[1]} {m[3]}", []).append(r)
        if set(expected) <= set(found) or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


@pytest.fixture
def rolling(tmp_path: Path, store_url: str, replicas: int) -> Iterator[Fleet]:
    with _fleet(tmp_path, store_url, replicas) as fleet:
        fleet.server_config.write_text(fleet.server_config.read_text() + ROLLOUT)
        fleet.start()
        yield fleet


@dataclass
class Hosts:
    """The five hosts' agents, and the replica each reported to last.

    The i-th run of host j goes to replica ``(j + i) % n``: the hosts of a cycle are spread across the
    replicas, and each moves to the next replica every cycle (web1 reports to replica 0, then to 1, then to 0).
    The rollout is read from the replica the host that ran last (the last named of the last cycle: the
    canaries', a wave's) did not report to, each host from the replica it did not report to.
    """

    fleet: Fleet
    agents: dict[str, Agent]
    runs: dict[str, int] = field(default_factory=dict)
    last: dict[str, int] = field(default_factory=dict)
    latest: str = HOSTS[-1]

    @classmethod
    def of(cls, fleet: Fleet) -> Hosts:
        tokens = fleet.minted("agent", *HOSTS)
        return cls(fleet, {h: Agent(fleet, h, t) for h, t in zip(HOSTS, tokens, strict=True)})

    def run(self, names: Sequence[str] = HOSTS, replica: int | None = None) -> None:
        """One cycle of ``names``, all at once; on ``replica`` when given."""
        started = []
        for h in names:
            to = (HOSTS.index(h) + self.runs.get(h, 0)) % self.fleet.replicas if replica is None else replica
            started.append((h, to, self.agents[h].start(replica=to)))
        for h, to, proc in started:
            _out, err = proc.communicate(timeout=120)
            assert proc.returncode in (0, 2, 4, 6), f"{h} on replica {to}: {err}"  # 6: changed, and failed
            self.runs[h] = self.runs.get(h, 0) + 1
            self.last[h] = to
            self.latest = h

    def away(self, host: str | None = None) -> int:
        """The replica ``host`` (else the host that ran last) did not report to last (with one server, it)."""
        return (self.last[host or self.latest] + 1) % self.fleet.replicas

    def rollout(self, token: str, replica: int | None = None) -> dict:  # type: ignore[type-arg]
        """The rollout in force, as ``replica`` says (else the one the host that ran last did not report to)."""
        answer = self.fleet.get("/v1/rollouts", token, replica=self.away() if replica is None else replica)
        assert answer.status_code == 200, answer.text
        return answer.json()["rollouts"][0]  # type: ignore[no-any-return]

    def agreed(self, token: str) -> dict:  # type: ignore[type-arg]
        """The rollout in force, the same on every replica (call it when no check can move it: done, halted,
        aborted)."""
        said = [self.rollout(token, r) for r in range(self.fleet.replicas)]
        assert all(s == said[0] for s in said), said
        return said[0]

    def ran(self, token: str) -> dict[str, str]:
        """The revision each host's last pass ran, each asked of the replica it did not report to last."""
        out = {}
        for h in HOSTS:
            answer = self.fleet.get(f"/v1/hosts/{h}", token, replica=self.away(h))
            assert answer.status_code == 200, answer.text
            out[h] = answer.json()["report"].get("revision")
        return out

    def until(self, token: str, what: str, value: object, replica: int | None = None,
              within: float = 20) -> dict:  # type: ignore[type-arg]
        deadline = time.monotonic() + within
        while True:
            ro = self.rollout(token, replica)
            if ro[what] == value:
                return ro
            assert time.monotonic() < deadline, ro
            time.sleep(0.2)


def planned(fleet: Fleet, rollout: int) -> dict[str, int]:
    """Each host's wave in ``rollout``, as the store keeps it (the API counts a wave's hosts, never names them)."""
    from datum.store import open_store
    from datum.store.rollouts import membership

    store = open_store(fleet.store_url)
    try:
        return membership(store, rollout)
    finally:
        store.dispose()


def test_a_good_revision_reaches_every_host_wave_by_wave(rolling: Fleet):
    fleet, [operator] = rolling, rolling.minted("operator")
    hosts = Hosts.of(fleet)
    hosts.run()
    first = hosts.agreed(operator)
    assert first["state"] == "done"
    (fleet.manifests / "common.yaml").write_text("resources:\n  - Directory[/srv]:\n      mode: '0750'\n")
    hosts.run(OTHERS)
    hosts.run(CANARIES)  # the canaries last: once both converged, the soak (1 s) may release wave 1
    if fleet.replicas > 1:
        assert hosts.last["web1"] != hosts.last["web2"]  # wave 0 completes from reports two replicas took
    ro = hosts.rollout(operator)
    assert ro["state"] == "rolling" and ro["previous"] == first["revision"]
    assert [(w["wave"], w["hosts"]) for w in ro["waves"]] == [(0, 2), (1, 2), (2, 1)]
    plan = planned(fleet, ro["id"])
    assert sorted(plan) == HOSTS and [h for h in HOSTS if plan[h] == 0] == CANARIES, plan
    released_by: dict[int, int] = {}  # a wave still held when the other replica was stopped -> the one that ran
    for wave in (0, 1, 2):
        if wave:
            # a server's own check ends the soak (no host reports meanwhile): with two replicas one is stopped
            # meanwhile, so replica 0's own check releases wave 1, replica 1's wave 2. Unless the soak (1 s)
            # ended before the stop (a loaded machine): any replica may release a wave, once; which one did
            # is then not this test's to say
            by = (wave - 1) % fleet.replicas
            with fleet.paused(*(r for r in range(fleet.replicas) if r != by)):
                if hosts.rollout(operator, by)["wave"] < wave:  # the store's, read after the stop
                    released_by[wave] = by
                hosts.until(operator, "wave", wave, replica=by)
            hosts.run([h for h in HOSTS if plan[h] > wave])  # held back while the wave is released
            hosts.run([h for h in HOSTS if plan[h] == wave])  # the wave last, as the canaries were
        ran = hosts.ran(operator)
        assert {h: ran[h] == ro["revision"] for h in HOSTS} == {h: plan[h] <= wave for h in HOSTS}, (wave, ran)
        counts = hosts.rollout(operator)["waves"]
        assert [w["converged"] == w["hosts"] for w in counts] == [w["wave"] <= wave for w in counts], counts
    hosts.until(operator, "state", "done")
    done = hosts.agreed(operator)
    assert done["revision"] == ro["revision"]
    # each decision made once, by one replica, though every replica saw the revision and checks the rollout
    expected = ["1 done (from None)", f"2 rolling (from {first['revision']})",
                "2 rolling, wave 1 of 2", "2 rolling, wave 2 of 2", "2 done, wave 2 of 2"]
    made = decided(fleet, expected)
    assert sorted(made) == sorted(expected) and all(len(r) == 1 for r in made.values()), made
    assert all(made[f"2 rolling, wave {w} of 2"] == [r] for w, r in released_by.items()), (released_by, made)
    status = fleet.datum("rollout", "status", "--json", "--config", str(fleet.server_config))
    assert status.code == 0, status.err
    assert json.loads(status.out)["rollout"]["state"] == "done"


def test_a_bad_revision_fails_on_the_canaries_halts_and_abort_returns_them(rolling: Fleet):
    fleet, [operator] = rolling, rolling.minted("operator")
    hosts = Hosts.of(fleet)
    hosts.run()
    first = hosts.agreed(operator)["revision"]
    (fleet.manifests / "common.yaml").write_text(
        "resources:\n  - Directory[/srv]: {}\n  - File[/srv/part.txt]:\n      content: \"of the bad revision\\n\"\n"
        "  - Exec[migrate]:\n      command: 'echo broken >&2; exit 3'\n"
    )
    hosts.run()
    ro = hosts.until(operator, "state", "halted")
    # applied part-way (docs/fleet.md): the canaries failed on Exec[migrate] and kept the File beside it
    part = {h: (hosts.agents[h].root / "srv" / "part.txt").exists() for h in HOSTS}
    assert part == {h: h in CANARIES for h in HOSTS}, part
    bad = ro["revision"]
    assert bad != first
    # halted on the first failure the check saw: one canary or both, never another host
    assert ro["failed"] and {f["host"] for f in ro["failed"]} <= set(CANARIES), ro["failed"]
    time.sleep(1.2)  # past the soak (1 s); the two cycles then take longer than a check's period (2 s)
    for _ in range(2):  # more cycles of the others, each to either replica: neither serves it to them
        hosts.run(OTHERS)
    ran = hosts.ran(operator)
    assert {h: ran[h] for h in CANARIES} == dict.fromkeys(CANARIES, bad), ran
    assert {h: ran[h] for h in OTHERS} == dict.fromkeys(OTHERS, first), ran
    assert hosts.agreed(operator)["state"] == "halted"
    expected = ["1 done (from None)", f"2 rolling (from {first})", "2 halted, wave 0 of 2"]
    made = decided(fleet, expected)
    assert sorted(made) == sorted(expected) and all(len(r) == 1 for r in made.values()), made
    (fleet.base / "operator.token").write_text(operator + "\n")
    (fleet.base / "viewer.token").write_text(fleet.minted("viewer")[0] + "\n")
    at = hosts.away()
    with ThreadPoolExecutor(2) as both:  # two commands that change nothing, at once
        status = both.submit(fleet.datum, "rollout", "status", "--config", str(fleet.server_config))
        refusal = both.submit(fleet.datum, "rollout", "abort", "--server", fleet.url_of(at),
                              "--token-file", str(fleet.base / "viewer.token"))
    table, refused = status.result(), refusal.result()
    assert table.code == 0 and "halted" in table.out and any(h in table.out for h in CANARIES), table.out
    assert refused.code != 0 and "fleet:ManageRollout" in refused.err + refused.out
    assert hosts.agreed(operator)["state"] == "halted"
    aborted = fleet.datum("rollout", "abort", "--server", fleet.url_of(at),
                          "--token-file", str(fleet.base / "operator.token"))
    assert aborted.code == 0, aborted.err
    assert "aborted" in aborted.out and all(h in aborted.out for h in CANARIES), aborted.out
    # the canaries fetch from the replica that did not take the abort (with one server, the one)
    elsewhere = (at + 1) % fleet.replicas
    assert hosts.rollout(operator, elsewhere)["state"] == "aborted"
    hosts.run(CANARIES, replica=elsewhere)
    assert hosts.agreed(operator)["state"] == "aborted"
    ran = hosts.ran(operator)
    assert set(ran.values()) == {first}, ran
    # the abort serves the previous revision, which does not declare the File: what the canaries applied stays
    assert all((hosts.agents[h].root / "srv" / "part.txt").read_text() == "of the bad revision\n" for h in CANARIES)


def test_a_replica_killed_mid_rollout_the_other_goes_on_and_no_host_is_taken_back(rolling: Fleet):
    """Issue 36, Done when (replica failover): the replica the agents talk to is killed (SIGKILL) with a rollout
    under way, the canaries and wave 1 on its revision; a fix is pushed meanwhile. The agents go to the other
    replica: it starts the fix's rollout from the last ``done`` revision and releases every wave of it by its own
    checks, and no host is ever served a revision older than the one its last pass ran (the per-host floor:
    wave 1's hosts, held back, keep the killed rollout's revision, never the last ``done`` one)."""
    if rolling.replicas < 2:
        pytest.skip("a failover needs two replicas")
    fleet, [operator] = rolling, rolling.minted("operator")
    hosts = Hosts.of(fleet)
    hosts.run(replica=0)
    first = hosts.agreed(operator)["revision"]
    (fleet.manifests / "common.yaml").write_text("resources:\n  - Directory[/srv]:\n      mode: '0750'\n")
    hosts.run(CANARIES, replica=0)
    ro = hosts.until(operator, "wave", 1, replica=0)  # the canaries converged, the soak (1 s) over
    second, plan = ro["revision"], planned(fleet, ro["id"])
    wave1 = [h for h in HOSTS if plan[h] == 1]
    hosts.run(wave1, replica=0)

    def ran() -> dict[str, str]:  # each host's last pass's revision, as the replica left says
        out = {}
        for h in HOSTS:
            answer = fleet.get(f"/v1/hosts/{h}", operator, replica=1)
            assert answer.status_code == 200, answer.text
            out[h] = answer.json()["report"]["revision"]
        return out

    assert ran() == {h: second if plan[h] <= 1 else first for h in HOSTS}
    killed = fleet.procs[0]
    assert killed is not None
    killed.kill()  # no shutdown: its held polls, its checks and its connections to the store end at once
    killed.wait(15)
    fleet.procs[0] = None
    (fleet.manifests / "common.yaml").write_text("resources:\n  - Directory[/srv]:\n      mode: '0700'\n")
    third = hosts.until(operator, "id", ro["id"] + 1, replica=1)  # the replica left saw the fix
    assert third["previous"] == first and third["state"] == "rolling", third
    order = {first: 0, second: 1, third["revision"]: 2}
    floor = ran()
    for cycle in range(12):
        hosts.run(replica=1)
        now = ran()
        went_back = {h: (floor[h], now[h]) for h in HOSTS if order[now[h]] < order[floor[h]]}
        assert not went_back, f"cycle {cycle}: hosts served a revision older than they ran: {went_back}"
        if cycle == 0:  # held back by the fix's rollout (from the last done): on what they ran, never on that
            assert {h: now[h] for h in wave1} == dict.fromkeys(wave1, second), now
        floor = now
        if hosts.rollout(operator, replica=1)["state"] == "done":
            break
        time.sleep(1.2)  # the soak (1 s): the replica left releases the next wave by its own check
    done = hosts.rollout(operator, replica=1)
    assert done["state"] == "done" and done["revision"] == third["revision"], done
    assert ran() == dict.fromkeys(HOSTS, third["revision"])
    released = [line for line in fleet.log_of(1).read_text().splitlines() if DECIDED.search(line)]
    assert any(f"rollout {third['id']} of" in line and "wave 2 of 2" in line for line in released), released

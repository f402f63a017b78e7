"""Reboots in order, health first, with real parts: a real ``datum serve`` on loopback (SQLite and PostgreSQL),
real ``datum agent --once`` processes running real hook and health-check commands, and a fake Prometheus on
loopback for the block query. Only the reboot is played (``fake-reboot`` records its call; a new boot id under
the host's root is the reboot), as in ``test_reboot_budget``."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from datum.core.explain import lookup

from .fakeprometheus import FIRING, FakePrometheus
from .test_reboot_budget import FAKE_REBOOT, NEEDS_REBOOT, Host

NODES = """\
nodes:
  - match: {name: "web*"}
    manifests: [needs-reboot.yaml]
    group: web
reboot_order:
  web: [web3, web1, web2]
"""

# A hook: records "<what> <host>" in a log, exits with the status it is given (0 when none).
HOOK = """#!/bin/sh
echo "$1 $2" >> "$3"
exit "${4:-0}"
"""


def _configure(fleet, fleet_settings: str) -> None:
    """The fleet directory and [fleet] settings for reboots; the server restarted to read them."""
    fleet.stop()
    (fleet.manifests / "nodes.yaml").write_text(NODES)
    (fleet.manifests / "needs-reboot.yaml").write_text(NEEDS_REBOOT)
    with fleet.server_config.open("a") as config:  # [fleet] is the file's last section
        config.write(fleet_settings)
    for name, text in (("fake-reboot", FAKE_REBOOT), ("hook", HOOK)):
        (fleet.base / name).write_text(text)
        (fleet.base / name).chmod(0o755)
    fleet.start()


def _host(fleet, name: str, pre_fails: bool = False, checked: bool = True) -> Host:
    h = Host(fleet, name).setup(fleet.token("agent", "--host", name))
    hook, log = fleet.base / "hook", fleet.base / "hooks.log"
    with (h.base / "agent.toml").open("a") as config:  # [host] is its only section
        config.write(f'pre_reboot = "{hook} pre {name} {log}{" 3" if pre_fails else ""}"\n')
        if checked:
            config.write(f'post_reboot = "{hook} post {name} {log}"\n')
            config.write(f'health_check = "test -f {h.base / "healthy"}"\n')
    return h


def _hooks(fleet) -> list[str]:
    log = fleet.base / "hooks.log"
    return log.read_text().splitlines() if log.exists() else []


def _calls(fleet) -> list[str]:
    log = fleet.base / "reboots.log"
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def _web(fleet, operator: str) -> dict:
    return next(g for g in fleet.get("/v1/reboots", operator).json()["groups"] if g["group"] == "web")


def _metric(fleet, operator: str, name: str) -> dict[str, float]:
    text = fleet.get("/metrics", operator).text
    return {s.labels.get("group", ""): s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name}


UNHEALTHY = "health_check (test) exited 1; post_reboot not run until healthy"


def test_hooks_run_and_the_lease_is_freed_only_once_back_healthy(fleet):
    _configure(fleet, "reboot_concurrency = 1\n")
    operator = fleet.token("operator")
    web1 = _host(fleet, "web1")
    web2 = _host(fleet, "web2", pre_fails=True, checked=False)
    code, err = web1.once()
    assert "rebooting: " in err, err
    assert _hooks(fleet) == ["pre web1"] and _calls(fleet) == ["web1"]  # drained, then rebooted
    assert web1.local()["reboot"]["action"].endswith("; pre_reboot ran")
    web1.reboot()
    code, err = web1.once()  # back, its resources converged, but its service is not healthy: no undrain, the lease holds
    local = web1.local()
    assert local["state"] == "degraded" and local["health"] == {"ok": False, "detail": UNHEALTHY}, err
    assert fleet.get("/v1/hosts/web1", operator).json()["report"]["health"]["ok"] is False
    [lease] = _web(fleet, operator)["rebooting"]
    assert lease["host"] == "web1" and lease["unhealthy"] == f"came back unhealthy: {UNHEALTHY}"
    assert _metric(fleet, operator, "datum_fleet_reboots_unhealthy")["web"] == 1.0
    assert _hooks(fleet) == ["pre web1"]
    code, err = web2.once()  # its group's slot is still web1's
    assert web2.local()["reason"] == "waiting for the group's reboot budget (1/1 rebooting)", err
    assert _metric(fleet, operator, "datum_fleet_reboots_waiting")["web"] == 1.0
    (web1.base / "healthy").touch()
    code, err = web1.once()  # healthy now: undrained, and its report frees the slot
    assert web1.local()["health"] == {"ok": True, "detail": "health_check passed, post_reboot ran"}, err
    assert _hooks(fleet) == ["pre web1", "post web1"]
    assert _web(fleet, operator)["rebooting"] == []
    code, err = web1.once()  # checked once healthy: not again
    assert "health" not in web1.local() and _hooks(fleet) == ["pre web1", "post web1"]
    code, err = web2.once()  # granted, but its drain fails: no reboot, the lease given back, said why
    reason = web2.local()["reason"]
    assert reason == (
        "not rebooting: the pre_reboot hook failed (pre_reboot (hook) exited 3); the reboot lease was given back"
    ), err
    assert _calls(fleet) == ["web1"] and _web(fleet, operator)["rebooting"] == []
    assert [e.name for e in lookup(reason)] == ["pre_reboot_failed"]
    assert fleet.get("/v1/hosts/web2", operator).json()["reason"] == reason
    needs = fleet.get("/v1/attention", operator).json()["needs"]
    assert [x["host"] for x in needs if x["reason"] == "pre_reboot_failed"] == ["web2"], needs


def test_a_host_not_back_healthy_by_the_timeout_halts_its_group_saying_unhealthy(sqlite_fleet):
    fleet = sqlite_fleet
    _configure(fleet, 'reboot_timeout = "6s"\n')
    operator = fleet.token("operator")
    web1, web2 = _host(fleet, "web1"), _host(fleet, "web2")
    assert "rebooting: " in web1.once()[1]
    web1.reboot()
    web1.once()  # back, unhealthy
    deadline = time.monotonic() + 30
    while _metric(fleet, operator, "datum_fleet_reboots_overdue")["web"] != 1.0:
        assert time.monotonic() < deadline
        time.sleep(0.5)
    code, err = web2.once()
    assert web2.local()["reason"] == (
        "the group's reboots are halted: web1 has not come back healthy from a reboot within [fleet] reboot_timeout "
        f"(web1 came back unhealthy: {UNHEALTHY})"
    ), err
    assert _calls(fleet) == ["web1"]
    [overdue] = _web(fleet, operator)["overdue"]
    assert overdue["host"] == "web1" and overdue["unhealthy"].startswith("came back unhealthy")
    page = httpx.get(fleet.url + "/ui/overview", headers={"Authorization": f"Bearer {operator}"}).text
    assert "host web1 came back from its reboot unhealthy" in page and "unhealthy after its reboot" in page
    listed = fleet.datum("reboots", "list", "--config", str(fleet.server_config))
    assert "web: web1 since" in listed.out and "overdue, unhealthy (came back unhealthy: " in listed.out
    hosts = fleet.datum("hosts", "--config", str(fleet.server_config))
    assert "host web1 came back from its reboot unhealthy" in hosts.out, hosts.out + hosts.err
    # web2 waits on web1, whose line it is: the CLI's advice and the page's badge make one call (they differed)
    [row] = [" ".join(line.split()) for line in hosts.out.splitlines() if line.startswith("web2 ")]
    assert row.startswith("web2 awaiting-reboot wait "), hosts.out
    own = httpx.get(fleet.url + "/ui/hosts/web2", headers={"Authorization": f"Bearer {operator}"}).text
    assert 'class="act act-wait"' in own.split('id="reboot"')[0] and "act-look" not in own.split('id="reboot"')[0], own


def test_a_host_back_unhealthy_is_degraded_everywhere_from_its_first_check_and_after_its_lease_is_cleared(sqlite_fleet):
    """Not converged until reboot_timeout: degraded with the health check's words on every surface from the first
    pass that checked, and still so (with its line of Needs a human) once an operator cleared its lease, until a
    check passes. The halted group's other host waits, the CLI's advice and the page's badge one call."""
    fleet = sqlite_fleet
    _configure(fleet, 'reboot_concurrency = 1\n')
    operator = fleet.token("operator")
    web1 = _host(fleet, "web1")
    assert "rebooting: " in web1.once()[1]
    web1.reboot()
    code, err = web1.once()  # back from its reboot, its health check fails
    why = f"came back unhealthy: {UNHEALTHY}"
    assert (web1.local()["state"], web1.local()["reason"]) == ("degraded", why), err
    assert code & 32, code  # the exit code's degraded flag

    def everywhere(expected_lease: bool) -> None:
        row = {h["host"]: h for h in fleet.get("/v1/hosts", operator).json()["hosts"]}["web1"]
        assert (row["state"], row["reason"]) == ("degraded", why), row
        needs = fleet.get("/v1/attention", operator).json()["needs"]
        mine = [n for n in needs if n.get("host") == "web1"]
        assert [n["reason"] for n in mine] == ["host_unhealthy"], needs
        assert mine[0]["text"] == "host web1 came back from its reboot unhealthy" and mine[0]["detail"] == why
        gauge = {(s.labels.get("reason"), s.labels.get("severity")): s.value
                 for f in text_string_to_metric_families(fleet.get("/metrics", operator).text) for s in f.samples
                 if s.name == "datum_needs_human"}
        assert gauge[("host_unhealthy", "look")] == 1.0, gauge
        states = {s.labels.get("state"): s.value
                  for f in text_string_to_metric_families(fleet.get("/metrics", operator).text) for s in f.samples
                  if s.name == "datum_hosts"}
        assert states.get("degraded") == 1.0 and states.get("converged", 0.0) == 0.0, states
        page = httpx.get(fleet.url + "/ui/hosts/web1", headers={"Authorization": f"Bearer {operator}"}).text
        assert "host web1 came back from its reboot unhealthy" in page and UNHEALTHY in page
        listed = fleet.datum("hosts", "--config", str(fleet.server_config))
        said = " ".join(listed.out.split())
        assert "web1 degraded go and look" in said and "host web1 came back from its reboot unhealthy" in said, said
        status = fleet.datum("status", "--state", str(web1.base / "agent.db"), "--config", str(web1.base / "agent.toml"))
        assert "host web1: degraded" in status.out and "came back unhealthy" in " ".join(status.out.split()), status
        assert bool(_web(fleet, operator)["rebooting"]) is expected_lease

    everywhere(expected_lease=True)
    cleared = fleet.datum("reboots", "clear", "web1", "--config", str(fleet.server_config))
    assert cleared.code == 0, cleared.err  # looked at: its group goes on
    web1.once()  # still unhealthy, its lease gone: still degraded, still a line
    everywhere(expected_lease=False)
    (web1.base / "healthy").touch()
    code, err = web1.once()
    assert web1.local()["state"] == "converged" and "reason" not in web1.local(), err
    assert not [n for n in fleet.get("/v1/attention", operator).json()["needs"] if n.get("host") == "web1"]


def _ask(fleet, host: str) -> dict:
    token = (fleet.base / "hosts" / host / "token").read_text().strip()
    return httpx.post(
        fleet.url + f"/v1/hosts/{host}/reboot-lease", json={"bootId": "boot-1", "intervalSeconds": 600},
        headers={"Authorization": f"Bearer {token}"}, timeout=30,
    ).json()


def test_the_block_query_holds_every_grant_then_the_order_decides(sqlite_fleet):  # the block is not in the store
    fleet = sqlite_fleet
    with FakePrometheus() as prometheus:
        prometheus.series = [FIRING]
        query = 'ALERTS{alertstate="firing",severity="page"}'
        _configure(fleet, f"reboot_block_query = '{query}'\nprometheus_url = \"{prometheus.url}\"\n")
        operator = fleet.token("operator")
        hosts = {n: _host(fleet, n, checked=False) for n in ("web1", "web2", "web3")}
        said = f'reboots are blocked: the Prometheus query {query} returns 1 series: ALERTS{{alertname="HostDown",alertstate="firing",severity="page"}}'
        code, err = hosts["web1"].once()  # a real agent, refused: it says why, and does not reboot
        assert hosts["web1"].local()["reason"] == said, err
        for name in ("web2", "web3"):
            answer = _ask(fleet, name)
            assert not answer["granted"] and answer["blocked"] == said.removeprefix("reboots are blocked: ")
            assert answer["reason"] == said
        assert _calls(fleet) == [] and query in prometheus.asked
        listing = fleet.get("/v1/reboots", operator).json()
        assert listing["blocked"] == answer["blocked"] and _web(fleet, operator)["waiting"] == ["web3", "web1", "web2"]
        assert _metric(fleet, operator, "datum_fleet_reboots_blocked") == {"": 1.0}
        assert _metric(fleet, operator, "datum_fleet_reboot_grants_blocked_total")[""] >= 3
        page = httpx.get(fleet.url + "/ui/overview", headers={"Authorization": f"Bearer {operator}"}).text
        assert "No reboot lease is granted in any group" in page and "web3, web1, web2" in page
        listed = fleet.datum("reboots", "list", "--config", str(fleet.server_config))
        assert "blocked: no reboot lease is granted in any group" in listed.out, listed.err
        assert [e.name for e in lookup(said)] == ["reboot_blocked"]
        prometheus.series = []  # the alert resolved: once the server's cached answer is stale, the order decides
        deadline = time.monotonic() + 20
        while (answer := _ask(fleet, "web2")).get("blocked"):
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert not answer["granted"] and answer["ahead"] == ["web3", "web1"]
        assert answer["reason"] == "waiting for its turn to reboot (reboot_order): web3, web1 first"
        assert [e.name for e in lookup(answer["reason"])] == ["reboot_turn"]
        assert _ask(fleet, "web3")["granted"]
        assert "blocked" not in fleet.get("/v1/reboots", operator).json()


def test_a_prometheus_that_cannot_be_reached_blocks(sqlite_fleet, tmp_path: Path):
    fleet = sqlite_fleet
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    _configure(fleet, f"reboot_block_query = 'up == 0'\nprometheus_url = \"{closed}\"\n")
    _host(fleet, "web1", checked=False)
    answer = _ask(fleet, "web1")
    assert not answer["granted"], answer
    assert answer["reason"].startswith("reboots are blocked: the Prometheus query up == 0 could not be asked, so reboots wait (fail safe): ")

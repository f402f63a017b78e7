"""Reboots across a fleet with booted hosts: order, the health gate with its hooks, the timeout.

Each fleet host is its own systemd-nspawn container (systemd as PID 1) running the real ``datum agent
--once`` inside against ONE real ``datum serve`` started here on the machine (SQLite under tmp_path,
127.0.0.1 on a free port: the containers share the machine's network, so the agents reach it). The
reboot is real: the ``automatic`` policy runs ``systemctl reboot`` inside, systemd-nspawn exits 133 and
``Container.rebooted`` boots the host again, with a new boot id. The agent's directory (its state file,
configuration, token, hook scripts and their log) is bound from the machine at /srv/keep, so it survives
the reboot as /var/lib does on a disk; everything else is gone, /run (a tmpfs) with its reboot marker too.

What needs the reboot is what a kernel upgrade does on Debian: an ``Exec`` that leaves
``/run/reboot-required`` behind, once (``creates`` a file in the bound directory), so that the pass after
the reboot finds no need. The in-process versions, with a played reboot, are
``tests/agent/test_reboot_health.py`` and ``tests/agent/test_reboot_budget.py``. Only the Prometheus the
block query asks (scenario ORDER) is a fake: a small HTTP endpoint on loopback with the real
``/api/v1/query`` answer's shape.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from container import DATUM, Container

from agent.fakeprometheus import FIRING, FakePrometheus
from agent.statefile import last_report

SERVE = [sys.executable, "-c", "from datum.cli.main import main; main()"]  # datum on the machine
KEEP = "/srv/keep"  # each host's bound directory, inside

NODES = """\
nodes:
  - match: {name: "web*"}
    manifests: [kernel.yaml]
    group: web
"""

# A kernel upgrade, once per host: Debian's marker on /run (gone with the reboot), and a file in the bound
# directory that says it was installed, so the first pass of the new boot finds nothing to reboot for.
KERNEL = f"""\
resources:
  - Exec[kernel-upgrade]:
      command: "printf '*** System restart required ***\\\\n' > /run/reboot-required && echo linux-image-datum-test > /run/reboot-required.pkgs && touch {KEEP}/kernel-installed"
      creates: {KEEP}/kernel-installed
"""

# A hook: "<what> <boot id>" appended to the log in the bound directory.
HOOK = """#!/bin/sh
echo "$1 $(cat /proc/sys/kernel/random/boot_id)" >> "$2"
"""

APP = "datum-app.service"  # the service scenario HEALTH checks, started by the test when it should be healthy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, predicate: Callable[[], object], timeout: float) -> object:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)
    return value


@dataclass
class Server:
    """``datum serve`` on the machine: a fleet directory, a SQLite store, [fleet] settings."""

    base: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config(self) -> Path:
        return self.base / "server.toml"

    def datum(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*SERVE, *args], capture_output=True, text=True, timeout=120, check=False)

    def token(self, principal: str, *extra: str) -> str:
        done = self.datum("token", "create", "--principal", principal, *extra, "--config", str(self.config))
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    def start(self, nodes: str, fleet_settings: str) -> None:
        manifests = self.base / "fleet"
        manifests.mkdir(parents=True)
        (manifests / "nodes.yaml").write_text(nodes)
        (manifests / "kernel.yaml").write_text(KERNEL)
        self.config.write_text(
            f'store = "sqlite:///{self.base / "datum.db"}"\n[server]\nscheduler = false\n'
            f'[fleet]\nmanifests = "{manifests}"\n{fleet_settings}'
        )
        log = (self.base / "serve.log").open("a")
        self.proc = subprocess.Popen(
            [*SERVE, "serve", "--config", str(self.config), "--port", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

        def ready() -> bool:
            assert self.proc is not None and self.proc.poll() is None, (self.base / "serve.log").read_text()
            try:
                return httpx.get(self.url + "/readyz", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        wait_for("datum serve", ready, 90)
        self.operator = self.token("operator")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(15)

    def get(self, path: str) -> dict:
        got = httpx.get(self.url + path, headers={"Authorization": f"Bearer {self.operator}"}, timeout=30)
        assert got.status_code == 200, got.text
        return got.json()

    def web(self) -> dict:
        """Group web's line of ``GET /v1/reboots``."""
        return next(g for g in self.get("/v1/reboots")["groups"] if g["group"] == "web")


@dataclass
class Host:
    """A fleet host: a booted container, its agent's files in ``keep`` (bound at /srv/keep)."""

    name: str
    keep: Path
    box: Container
    server: Server

    def configure(self, settings: str = "") -> None:
        (self.keep / "agent.toml").write_text(
            f'[host]\nname = "{self.name}"\nreboot_policy = "automatic"\n{settings}'
        )
        (self.keep / "token").write_text(self.server.token("agent", "--host", self.name) + "\n")
        (self.keep / "token").chmod(0o600)
        (self.keep / "hook").write_text(HOOK)

    @property
    def boot_id(self) -> str:
        return self.box.run("cat", "/proc/sys/kernel/random/boot_id").stdout.strip()

    def once(self) -> tuple[int, str]:
        """One ``datum agent --once`` inside. A pass that reboots is cut short by the reboot."""
        try:
            done = self.box.run(
                DATUM, "agent", "--server", self.server.url, "--token-file", f"{KEEP}/token", "--root", "/",
                "--state", f"{KEEP}/agent.db", "--once", "--config", f"{KEEP}/agent.toml",
                env={"DATUM_HOME": f"{KEEP}/home"}, check=False, timeout=180,
            )
        except subprocess.TimeoutExpired as exc:  # say what the host was doing
            assert self.box.proc is not None
            alive = self.box.proc.poll() is None
            ps = self.box.run("ps", "-ef", check=False, timeout=10).stdout if alive else ""
            raise AssertionError(
                f"{self.name}'s agent ran past 180 s; nspawn {'running' if alive else self.box.proc.returncode}\n"
                f"{ps}\n{(exc.stderr or b'')[-3000:]!r}"
            ) from exc
        return done.returncode, done.stderr

    def local(self) -> dict:
        """The agent's last report, as its state file keeps it (read from the machine, through the bind)."""
        return last_report(self.keep / "agent.db")

    def reboots(self) -> str:
        """A pass that takes the lease and reboots for real; the boot id it rebooted from."""
        before = self.boot_id
        code, err = self.once()
        report = self.local()
        action = report.get("reboot", {}).get("action", "")
        assert report["state"] == "awaiting-reboot" and action.startswith(
            "rebooting now (reboot_policy automatic); holds a reboot lease of group web"
        ), (code, err, report)
        assert report["reboot"]["bootId"] == before
        self.box.rebooted(timeout=120)  # nspawn exits 133: the reboot happened
        assert self.boot_id != before
        return before

    def waits(self, reason: str) -> None:
        """A pass that needs a reboot, is refused, and does not reboot: its report says why."""
        before = self.boot_id
        code, err = self.once()
        report = self.local()
        assert code & 16 and (report["state"], report["reason"]) == ("awaiting-reboot", reason), (code, err, report)
        assert "requestedAt" not in report["reboot"], report
        assert self.box.proc is not None and self.box.proc.poll() is None and self.boot_id == before  # still up

    def back(self) -> dict:
        """The first pass (or a later one) from the new boot: converged, nothing to reboot for; degraded, saying
        why, while its health check fails."""
        code, err = self.once()
        report = self.local()
        sick = (report.get("health") or {}).get("ok") is False
        assert report["state"] == ("degraded" if sick else "converged"), (code, err, report)
        assert report["bootId"] == self.boot_id, (code, err, report)
        if sick:
            assert report["reason"] == f"came back unhealthy: {report['health']['detail']}", report
        return report

    def hooks(self) -> list[str]:
        log = self.keep / "hooks.log"
        return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def fleet(host, tmp_path: Path) -> Iterator[tuple[Server, Host, Host]]:
    """A server on the machine and two booted hosts, web1 and web2, of group web. (``host``, the session's
    container, skips where nspawn or the root is missing, and installs Datum's virtualenv they share.)"""
    server = Server(tmp_path / "server", free_port())
    hosts = []
    try:
        for name in ("web1", "web2"):
            keep = tmp_path / name
            keep.mkdir()
            box = Container(binds={keep: KEEP})
            hosts.append(Host(name, keep, box, server))
            box.boot()
        yield server, hosts[0], hosts[1]
    finally:
        for h in hosts:
            h.box.shutdown()
        server.stop()


def test_order_the_second_in_reboot_order_waits_its_turn_and_goes_once_the_first_is_back(fleet):
    server, web1, web2 = fleet
    with FakePrometheus() as prometheus:
        # A paging alert fires while both find the kernel upgrade: both ask, neither is granted, both
        # requests stay. The order then decides among them, whoever's pass comes first.
        prometheus.series = [FIRING]
        server.start(
            NODES + "reboot_order:\n  web: [web2, web1]\n",
            "reboot_concurrency = 1\nreboot_block_query = 'ALERTS{alertstate=\"firing\"}'\n"
            f'prometheus_url = "{prometheus.url}"\n',
        )
        web1.configure('health_check = "/bin/systemctl is-active --quiet systemd-journald.service"\n')
        web2.configure('health_check = "/bin/systemctl is-active --quiet systemd-journald.service"\n')
        blocked = (
            "reboots are blocked: the Prometheus query ALERTS{alertstate=\"firing\"} returns 1 series: "
            'ALERTS{alertname="HostDown",alertstate="firing",severity="page"}'
        )
        web1.waits(blocked)
        web2.waits(blocked)
        prometheus.series = []  # resolved: once the server's cached answer (5 s) is stale, the order decides
        wait_for("the block to lift", lambda: "blocked" not in server.get("/v1/reboots"), 30)
        assert server.web()["waiting"] == ["web2", "web1"]

        web1.waits("waiting for its turn to reboot (reboot_order): web2 first")  # web1's pass comes first
        first1 = web1.boot_id
        first2 = web2.reboots()  # web2's turn: it takes the lease and reboots, for real
        assert [x["host"] for x in server.web()["rebooting"]] == ["web2"]
        web1.waits("waiting for the group's reboot budget (1/1 rebooting)")  # web2 is not back yet
        back = web2.back()  # the new boot, converged (no marker on the new /run), healthy: the lease is freed
        assert back["health"] == {"ok": True, "detail": "health_check passed"}, back
        assert server.web()["rebooting"] == []
        assert server.get("/v1/hosts/web2")["report"]["bootId"] == web2.boot_id != first2

        assert web1.reboots() == first1  # now web1: granted, reboots
        assert [x["host"] for x in server.web()["rebooting"]] == ["web1"]
        assert web1.back()["health"]["ok"] is True
        assert server.web()["rebooting"] == [] and server.web()["waiting"] == []
        web2.back()  # back from its reboot, web2 does not reboot again (its upgrade ran once)
        assert server.web()["rebooting"] == []


def test_health_gate_the_lease_holds_until_the_service_is_up_then_post_reboot_runs(fleet):
    server, web1, web2 = fleet
    server.start(NODES, "reboot_concurrency = 1\n")
    log = f"{KEEP}/hooks.log"
    web1.configure(
        f'pre_reboot = "/bin/sh {KEEP}/hook pre {log}"\npost_reboot = "/bin/sh {KEEP}/hook post {log}"\n'
        f'health_check = "/bin/systemctl is-active --quiet {APP}"\n'
    )
    web2.configure()
    first = web1.reboots()  # drained (pre_reboot, in the boot it left), then rebooted
    assert web1.hooks() == [f"pre {first}"]
    assert web1.local()["reboot"]["action"].endswith("; pre_reboot ran")

    # Back, converged, but its service is not running: no undrain, the lease holds, saying why.
    unhealthy = "health_check (systemctl) exited 3; post_reboot not run until healthy"
    assert web1.back()["health"] == {"ok": False, "detail": unhealthy}
    [lease] = server.web()["rebooting"]
    assert lease["host"] == "web1" and lease["unhealthy"] == f"came back unhealthy: {unhealthy}"
    assert server.get("/v1/hosts/web1")["report"]["health"]["ok"] is False
    assert web1.hooks() == [f"pre {first}"]
    web2.waits("waiting for the group's reboot budget (1/1 rebooting)")  # the slot is still web1's
    assert web1.back()["health"]["ok"] is False  # checked again at the next pass: still down

    # The service starts (a real unit under the container's systemd): healthy, undrained, the lease freed.
    web1.box.run("systemd-run", f"--unit={APP}", "sleep", "infinity")
    assert web1.back()["health"] == {"ok": True, "detail": "health_check passed, post_reboot ran"}
    assert web1.hooks() == [f"pre {first}", f"post {web1.boot_id}"]  # post_reboot in the new boot
    assert server.web()["rebooting"] == []
    assert "health" not in web1.back() and len(web1.hooks()) == 2  # checked once healthy: not again

    web2.reboots()  # the next one goes
    assert web2.back().get("health") is None and server.web()["rebooting"] == []


def test_timeout_a_host_back_unhealthy_past_reboot_timeout_halts_its_group(fleet):
    server, web1, web2 = fleet
    server.start(NODES, 'reboot_concurrency = 1\nreboot_timeout = "30s"\n')
    web1.configure(f'health_check = "test -f {KEEP}/healthy"\n')  # a file the test never makes
    web2.configure()
    web1.reboots()
    unhealthy = "health_check (test) exited 1"
    assert web1.back()["health"] == {"ok": False, "detail": unhealthy}
    [lease] = server.web()["rebooting"] or server.web()["overdue"]  # (overdue already on a slow machine)
    assert lease["host"] == "web1" and lease["unhealthy"] == f"came back unhealthy: {unhealthy}"

    wait_for("web1's lease to be overdue", lambda: server.web()["overdue"], 60)
    web2.waits(
        "the group's reboots are halted: web1 has not come back healthy from a reboot within [fleet] reboot_timeout "
        f"(web1 came back unhealthy: {unhealthy})"
    )
    [overdue] = server.web()["overdue"]
    assert overdue["host"] == "web1" and server.web()["rebooting"] == []
    metrics = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {server.operator}"}, timeout=30).text
    for name in ("datum_fleet_reboots_overdue", "datum_fleet_reboots_unhealthy"):
        assert f'{name}{{group="web"}} 1.0' in metrics, metrics
    hosts = server.datum("hosts", "--config", str(server.config))
    assert "host web1 came back from its reboot unhealthy" in hosts.stdout, hosts.stdout + hosts.stderr
    listed = server.datum("reboots", "list", "--config", str(server.config))
    assert "overdue, unhealthy (came back unhealthy: " in listed.stdout, listed.stdout + listed.stderr

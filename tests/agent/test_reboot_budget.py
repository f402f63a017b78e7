"""The fleet's reboot budget with real parts: a real ``datum serve`` on loopback (SQLite and PostgreSQL) and
real ``datum agent --once`` processes, several at once. Only the reboot is fake: the reboot command is a
script that records its call (``fake-reboot``), and a reboot is the test writing a new boot id under the
host's root (``[host] boot_id_file``)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from markupsafe import escape
from prometheus_client.parser import text_string_to_metric_families

from datum.core.explain import Vocabulary, explain

from .conftest import DATUM, Fleet, _fleet
from .statefile import last_report

WAITING = "waiting for the group's reboot budget (2/2 rebooting)"

NODES = """\
nodes:
  - match: {name: "web*"}
    manifests: [needs-reboot.yaml]
    group: web
  - match: {name: "db*"}
    manifests: [needs-reboot.yaml]
    group: db
  - match: {name: "slow*"}
    manifests: [slow.yaml]
    group: web
"""

# The reboot need first, then a resource that takes a while, then one more: room for a SIGTERM mid-pass.
SLOW = """\
include: [needs-reboot.yaml]
resources:
  - Exec[wait]:
      command: "sleep 4"
  - Directory[/etc]: {}
  - File[/etc/after]:
      content: "after\\n"
"""

# What a kernel upgrade leaves behind on Debian: the marker a reboot clears (stale after a new boot id).
NEEDS_REBOOT = """\
resources:
  - Directory[/run]: {}
  - File[/run/reboot-required]:
      content: ""
  - File[/run/reboot-required.pkgs]:
      content: "linux-image-test\\n"
"""

# A fake reboot command: records that it was called, by whom and in which boot; reboots nothing.
FAKE_REBOOT = """#!/bin/sh
echo "$1 $(cat "$2")" >> "$3"
exit "${4:-0}"
"""


@dataclass
class Host:
    """One host of the fleet: its root (with its boot id under it), its agent's state, configuration and token."""

    fleet: Fleet
    name: str
    fail_reboot: bool = False
    maintenance: bool = False  # reboot_policy maintenance, in a window that is always open

    @property
    def base(self) -> Path:
        return self.fleet.base / "hosts" / self.name

    @property
    def boot_id_file(self) -> Path:
        return self.base / "root" / "proc" / "sys" / "kernel" / "random" / "boot_id"

    @property
    def boot_id(self) -> str:
        return self.boot_id_file.read_text().strip()

    def setup(self, token: str) -> Host:
        self.boot_id_file.parent.mkdir(parents=True)
        self.boot_id_file.write_text("boot-1\n")
        fake = self.fleet.base / "fake-reboot"
        command = f"{fake} {self.name} {self.boot_id_file} {self.fleet.base / 'reboots.log'}"
        (self.base / "agent.toml").write_text(
            f'[host]\nname = "{self.name}"\n'
            + ('reboot_policy = "maintenance"\nmaintenance_window = "daily 00:00-24:00"\n' if self.maintenance
               else 'reboot_policy = "automatic"\n')
            + f'reboot_command = "{command}{" 1" if self.fail_reboot else ""}"\n'
            f'boot_id_file = "{self.boot_id_file}"\n'
        )
        (self.base / "token").write_text(token + "\n")
        (self.base / "token").chmod(0o600)
        return self

    def start(self) -> subprocess.Popen[str]:
        """``datum agent --once`` as its own process."""
        return subprocess.Popen(
            [*DATUM, "agent", "--server", self.fleet.url, "--token-file", str(self.base / "token"),
             "--root", str(self.base / "root"), "--state", str(self.base / "agent.db"), "--once",
             "--config", str(self.base / "agent.toml")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "DATUM_HOME": str(self.base / "home")},
        )

    def once(self) -> tuple[int, str]:
        proc = self.start()
        _out, err = proc.communicate(timeout=120)
        return proc.returncode, err

    def reboot(self) -> None:
        """What the real reboot would do to the boot id."""
        n = int(self.boot_id.removeprefix("boot-")) + 1
        self.boot_id_file.write_text(f"boot-{n}\n")

    def local(self) -> dict:
        return last_report(self.base / "agent.db")


def _calls(fleet: Fleet) -> list[str]:
    log = fleet.base / "reboots.log"
    return log.read_text().splitlines() if log.exists() else []


def _all_at_once(hosts: list[Host]) -> dict[str, tuple[int, str]]:
    procs = {h.name: h.start() for h in hosts}
    done = {}
    for name, proc in procs.items():
        _out, err = proc.communicate(timeout=180)
        done[name] = (proc.returncode, err)
    return done


@contextmanager
def _budget_fleet(base: Path, store_url: str, fleet_settings: str) -> Iterator[Fleet]:
    with _fleet(base, store_url) as fleet:
        (fleet.manifests / "nodes.yaml").write_text(NODES)
        (fleet.manifests / "needs-reboot.yaml").write_text(NEEDS_REBOOT)
        (fleet.manifests / "slow.yaml").write_text(SLOW)
        with fleet.server_config.open("a") as config:  # [fleet] is the file's last section
            config.write(fleet_settings)
        fake = base / "fake-reboot"
        fake.write_text(FAKE_REBOOT)
        fake.chmod(0o755)
        fleet.start()
        yield fleet


@pytest.fixture
def budget_fleet(tmp_path: Path, store_url: str) -> Iterator[Fleet]:
    """Two of a group at once, on SQLite and on PostgreSQL."""
    with _budget_fleet(tmp_path, store_url, "reboot_concurrency = 2\n") as fleet:
        yield fleet


def _hosts(fleet: Fleet, *names: str, fail: tuple[str, ...] = (), maintenance: tuple[str, ...] = ()) -> list[Host]:
    return [Host(fleet, n, n in fail, n in maintenance).setup(fleet.token("agent", "--host", n)) for n in names]


def _rebooting(fleet: Fleet, operator: str) -> dict[str, list[str]]:
    body = fleet.get("/v1/reboots", operator).json()
    return {g["group"]: [x["host"] for x in g["rebooting"]] for g in body["groups"]}


def _metric(fleet: Fleet, operator: str, name: str) -> dict[str, float]:
    text = fleet.get("/metrics", operator).text
    return {s.labels.get("group", ""): s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name}


def test_never_more_than_n_of_a_group_reboot_at_once_and_a_new_boot_id_frees_the_slot(budget_fleet: Fleet):
    fleet = budget_fleet
    operator = fleet.token("operator")
    web = _hosts(fleet, "web1", "web2", "web3", "web4", "web5", maintenance=("web4", "web5"))
    db = _hosts(fleet, "db1")
    ran = _all_at_once([*web, *db])  # six agents at once, each its own process
    calls = _calls(fleet)
    rebooted = sorted(line.split()[0] for line in calls)
    assert len([h for h in rebooted if h.startswith("web")]) == 2, (calls, ran)
    assert "db1" in rebooted  # another group has its own budget
    assert all(line.endswith(" boot-1") for line in calls)
    waiting = [h for h in web if h.name not in rebooted]
    for h in waiting:
        code, err = ran[h.name]
        assert code & 16, err  # awaiting reboot
        local = h.local()
        assert (local["state"], local["reason"]) == ("awaiting-reboot", WAITING), err
        assert "requestedAt" not in local["reboot"]
        row = fleet.get(f"/v1/hosts/{h.name}", operator).json()
        assert (row["state"], row["reason"]) == ("awaiting-reboot", WAITING)
        assert "rebooting" not in row
    for name in rebooted:
        code, err = ran[name]
        assert "rebooting: " in err, err
        row = fleet.get(f"/v1/hosts/{name}", operator).json()
        assert row["rebooting"]["group"] == ("db" if name == "db1" else "web")
        assert row["rebooting"]["bootId"] == "boot-1" and row["rebooting"]["since"]
        assert row["report"]["reboot"]["requestedAt"]
    listed = {h["host"]: h.get("rebooting") for h in fleet.get("/v1/hosts", operator).json()["hosts"]}
    assert sorted(n for n, lease in listed.items() if lease) == rebooted
    assert sorted(_rebooting(fleet, operator)["web"]) == [n for n in rebooted if n.startswith("web")]
    assert _metric(fleet, operator, "datum_fleet_rebooting") == {"db": 1.0, "default": 0.0, "web": 2.0}
    page = httpx.get(fleet.url + "/ui/overview", headers={"Authorization": f"Bearer {operator}"}).text
    assert "Rebooting" in page and all(f">{n}</a>" in page for n in rebooted)
    assert str(escape(explain(Vocabulary.HOST_REASON, "reboot_budget").do)) in page  # explained in place
    # A bound token takes only its own host's lease.
    refused = httpx.post(
        fleet.url + "/v1/hosts/web1/reboot-lease", json={"bootId": "boot-1"},
        headers={"Authorization": f"Bearer {fleet.token('agent', '--host', 'web9')}"},
    )
    assert refused.status_code == 403 and refused.json()["issues"][0]["action"] == "fleet:TakeRebootLease"

    # A waiting host asks again: still full, still no reboot.
    assert waiting[0].once()[0] & 16 and len(_calls(fleet)) == len(calls)
    # One rebooting host comes back (a new boot id) and reports: its slot frees, and it does not reboot again.
    back = next(h for h in web if h.name in rebooted)
    back.reboot()
    code, err = back.once()
    assert code == 0, err  # the marker is stale after the reboot: converged
    assert "rebooting" not in fleet.get(f"/v1/hosts/{back.name}", operator).json()
    assert len(_rebooting(fleet, operator)["web"]) == 1
    # The three waiting hosts ask at once: exactly one gets the free slot.
    _all_at_once(waiting)
    later = _calls(fleet)[len(calls):]
    assert len(later) == 1, later
    assert len(_rebooting(fleet, operator)["web"]) == 2
    assert back.name not in " ".join(later)


def test_a_host_not_back_halts_its_group_until_an_operator_clears_its_lease(tmp_path: Path):
    with _budget_fleet(tmp_path, f"sqlite:///{tmp_path / 'datum.db'}", 'reboot_timeout = "8s"\n') as fleet:
        operator = fleet.token("operator")
        web1, web2 = _hosts(fleet, "web1", "web2")
        assert web1.once()[0] & 16
        token = (web2.base / "token").read_text().strip()
        asked = httpx.post(  # what web2's agent asks, without waiting for a process to start
            fleet.url + "/v1/hosts/web2/reboot-lease", json={"bootId": "boot-1"},
            headers={"Authorization": f"Bearer {token}"},
        ).json()
        assert not asked["granted"] and asked["reason"] == "waiting for the group's reboot budget (1/1 rebooting)"
        lease = asked["rebooting"][0]
        assert lease["host"] == "web1"
        assert datetime.fromisoformat(lease["expiresAt"]) - datetime.fromisoformat(lease["since"]) == timedelta(seconds=8)
        deadline = time.monotonic() + 30
        while _metric(fleet, operator, "datum_fleet_reboots_overdue")["web"] != 1.0:  # web1 never came back
            assert time.monotonic() < deadline
            time.sleep(0.5)
        code, err = web2.once()  # web1's lease expired, and halts the group: web2 stays up and says why
        assert "the group's reboots are halted: web1 has not come back" in err, err
        assert [c.split()[0] for c in _calls(fleet)] == ["web1"]
        assert web2.local()["reason"].startswith("the group's reboots are halted")
        groups = {g["group"]: g for g in fleet.get("/v1/reboots", operator).json()["groups"]}
        assert groups["web"]["rebooting"] == [] and [x["host"] for x in groups["web"]["overdue"]] == ["web1"]
        page = httpx.get(fleet.url + "/ui/overview", headers={"Authorization": f"Bearer {operator}"}).text
        assert "host web1 has not come back from its reboot" in page
        # an operator looked at web1 and clears its lease: the group goes on, web2 reboots at its next pass
        from datum.store import open_store
        from datum.store.leases import clear

        store = open_store(f"sqlite:///{tmp_path / 'datum.db'}")
        try:
            assert clear(store, "web1") is not None
        finally:
            store.dispose()
        code, err = web2.once()
        assert "rebooting: " in err, err
        assert [c.split()[0] for c in _calls(fleet)] == ["web1", "web2"]


def test_no_reboot_without_a_lease_when_the_server_is_unreachable_or_the_command_fails(tmp_path: Path):
    with _budget_fleet(tmp_path, f"sqlite:///{tmp_path / 'datum.db'}", "") as fleet:
        operator = fleet.token("operator")
        web1, web2 = _hosts(fleet, "web1", "web2", fail=("web1",))
        code, err = web1.once()
        assert "the reboot command failed" in err, err
        assert web1.local()["reboot"]["action"].startswith("the reboot command failed")
        assert _rebooting(fleet, operator)["web"] == []  # given back: it is not rebooting
        assert web2.once()[0] & 16 and [c.split()[0] for c in _calls(fleet)] == ["web1", "web2"]
        assert _rebooting(fleet, operator)["web"] == ["web2"]
        web2.reboot()
        fleet.stop()
        # web2 comes back into a kernel that needs another reboot, and the server is away.
        (web2.base / "root" / "run" / "reboot-required").write_text("again\n")
        code, err = web2.once()
        assert code & 16, err
        report = web2.local()
        assert report["state"] == "awaiting-reboot"
        assert report["reason"].startswith("not rebooting: no reboot lease from the server (cannot reach "), report
        assert "requestedAt" not in report["reboot"]
        assert len(_calls(fleet)) == 2  # no reboot without a lease


def test_a_pass_stopped_part_way_takes_no_lease_and_does_not_reboot(tmp_path: Path):
    import signal

    with _budget_fleet(tmp_path, f"sqlite:///{tmp_path / 'datum.db'}", "") as fleet:
        operator = fleet.token("operator")
        (slow,) = _hosts(fleet, "slow1")
        proc = slow.start()
        marker = slow.base / "root" / "run" / "reboot-required"
        deadline = time.monotonic() + 60
        while not marker.exists():  # the need is found; the Exec runs now
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        report = slow.local()
        assert report.get("incomplete") and report["state"] == "unknown", err
        assert _calls(fleet) == [] and _rebooting(fleet, operator)["web"] == []  # no lease asked for
        code, err = slow.once()  # the next, whole pass reboots
        assert "rebooting: " in err and _rebooting(fleet, operator)["web"] == ["slow1"], err

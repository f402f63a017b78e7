"""``Service`` against a real systemd (PID 1 in the container): what the fake only claimed."""

from __future__ import annotations

import json

import pytest
from container import by_id, summary

UNIT = """[Unit]
Description=datum test {name}

[Service]
{service}

[Install]
WantedBy=multi-user.target
"""


def unit(host, name: str, service: str = "ExecStart=/bin/sleep infinity") -> None:
    host.write(f"/etc/systemd/system/{name}.service", UNIT.format(name=name, service=service))
    host.run("systemctl", "daemon-reload")


def state(host, name: str) -> tuple[str, str]:
    active = host.run("systemctl", "is-active", name, check=False).stdout.strip()
    enabled = host.run("systemctl", "is-enabled", name, check=False).stdout.strip()
    return active, enabled


def test_start_and_enable(host):
    unit(host, "svc-start")
    code, report = host.apply(
        "resources:\n  - Service[svc-start]:\n      ensure: running\n      enable: true\n"
    )
    assert code == 2, summary(report)
    line = by_id(report)["Service[svc-start]"]
    assert line["action"] == "update"
    # What it found, in enforce mode as observe mode says it.
    assert line["reason"] == "inactive, want running, disabled, want enabled", summary(report)
    assert state(host, "svc-start") == ("active", "enabled")


def test_stop_and_disable(host):
    unit(host, "svc-stop")
    host.run("systemctl", "enable", "--now", "svc-stop")
    assert state(host, "svc-stop") == ("active", "enabled")
    code, report = host.apply(
        "resources:\n  - Service[svc-stop]:\n      ensure: stopped\n      enable: false\n"
    )
    assert code == 2, summary(report)
    assert by_id(report)["Service[svc-stop]"]["state"] == "converged"
    assert state(host, "svc-stop") == ("inactive", "disabled")
    code, report = host.apply(
        "resources:\n  - Service[svc-stop]:\n      ensure: stopped\n      enable: false\n"
    )
    assert code == 0, summary(report)


def test_a_changed_file_restarts_the_service_that_subscribes_to_it(host):
    unit(host, "svc-restart")
    host.run("systemctl", "start", "svc-restart")
    before = host.run("systemctl", "show", "-P", "MainPID", "svc-restart").stdout.strip()

    def manifest(text: str) -> str:
        return f"""
resources:
  - File[svc-restart.conf]:
      path: /etc/svc-restart.conf
      content: {json.dumps(text)}
  - Service[svc-restart]:
      ensure: running
      subscribes: [File[svc-restart.conf]]
"""

    code, report = host.apply(manifest("one\n"))
    assert code == 2, summary(report)
    assert by_id(report)["Service[svc-restart]"]["action"] == "restart"
    after = host.run("systemctl", "show", "-P", "MainPID", "svc-restart").stdout.strip()
    assert after != before and after != "0"
    # Unchanged file: no restart.
    code, report = host.apply(manifest("one\n"))
    assert code == 0, summary(report)
    assert host.run("systemctl", "show", "-P", "MainPID", "svc-restart").stdout.strip() == after


def test_a_unit_that_fails_to_start_is_failed_with_its_journal(host):
    unit(
        host,
        "svc-broken",
        "Type=exec\nExecStartPre=/bin/sh -c 'echo datum-test: no config at /etc/broken.conf >&2; exit 3'\n"
        "ExecStart=/bin/sleep infinity",
    )
    code, report = host.apply("resources:\n  - Service[svc-broken]:\n      ensure: running\n")
    assert code & 4, summary(report)
    line = by_id(report)["Service[svc-broken]"]
    assert line["state"] == "failed"
    assert "systemctl start exited" in line["reason"]
    assert "journal:" in line["reason"]
    assert "datum-test: no config at /etc/broken.conf" in line["reason"]
    assert report["state"] == "failed"


def test_a_unit_that_dies_after_starting_is_failed_with_its_journal(host):
    unit(host, "svc-dies", "ExecStart=/bin/sh -c 'echo datum-test: dying >&2; exit 7'")
    code, report = host.apply("resources:\n  - Service[svc-dies]:\n      ensure: running\n")
    assert code & 4, summary(report)
    line = by_id(report)["Service[svc-dies]"]
    assert line["state"] == "failed"
    assert "datum-test: dying" in line["reason"], line["reason"]


def test_a_unit_that_does_not_exist_is_failed_not_skipped(host):
    code, report = host.apply("resources:\n  - Service[svc-nowhere]:\n      ensure: running\n")
    line = by_id(report)["Service[svc-nowhere]"]
    assert line["state"] == "failed", summary(report)
    assert "svc-nowhere.service not found" in line["reason"]
    assert code & 4 and not code & 32


@pytest.mark.smoke
def test_observe_mode_reports_a_stopped_service_as_drifted_and_leaves_it(host):
    unit(host, "svc-observed")
    code, report = host.apply(
        "resources:\n  - Service[svc-observed]:\n      ensure: running\n", mode="observe"
    )
    assert code == 8, summary(report)
    line = by_id(report)["Service[svc-observed]"]
    assert line["state"] == "drifted"
    assert "inactive, want running" in line["reason"]
    assert report["state"] == "drifted"
    assert state(host, "svc-observed")[0] == "inactive"

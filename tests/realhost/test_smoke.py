"""The container boots with systemd as PID 1 and Datum converges a unit inside it."""

from __future__ import annotations

import json

import pytest
from container import by_id, summary

pytestmark = pytest.mark.smoke

UNIT = """[Unit]
Description=datum smoke

[Service]
ExecStart=/bin/sleep infinity

[Install]
WantedBy=multi-user.target
"""


def test_systemd_is_pid1_inside(host):
    assert host.run("cat", "/proc/1/comm").stdout.strip() == "systemd"
    assert host.run("systemctl", "is-system-running", check=False).stdout.strip() in (
        "running",
        "degraded",
    )


def test_a_unit_written_by_a_file_is_started_and_enabled_then_idle(host):
    manifest = f"""
resources:
  - File[smoke.service]:
      path: /etc/systemd/system/datum-smoke.service
      content: {json.dumps(UNIT)}
  - Exec[daemon-reload]:
      command: systemctl daemon-reload
      refreshonly: true
      subscribes: [File[smoke.service]]
  - Service[datum-smoke]:
      ensure: running
      enable: true
      requires: [Exec[daemon-reload]]
"""
    code, report = host.apply(manifest)
    assert code == 2, summary(report)
    assert by_id(report)["Service[datum-smoke]"]["state"] == "converged"
    assert host.run("systemctl", "is-active", "datum-smoke").stdout.strip() == "active"
    assert host.run("systemctl", "is-enabled", "datum-smoke").stdout.strip() == "enabled"
    code, report = host.apply(manifest)
    assert code == 0, summary(report)
    assert report["state"] == "converged"

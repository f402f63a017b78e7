"""Reboots end to end: markers, kernel packages, newer kernels, the boot id, and every reboot policy.

The reboot command is a harmless ``touch`` so the tests can see whether and
when it ran; that is the one stand-in for a real reboot.
"""

from __future__ import annotations

import os
from datetime import datetime

import pytest

from providers.debs import build_deb, dpkg_root

IDLE = "resources:\n  - File[/etc/motd]:\n      content: 'hi\\n'\n"


def _marker(host, pkgs: str = "linux-image-6.1.0-18-amd64\n") -> None:
    run = host.root / "run"
    run.mkdir(exist_ok=True)
    (run / "reboot-required").write_text("*** System restart required ***\n")
    (run / "reboot-required.pkgs").write_text(pkgs)


def test_marker_gives_awaiting_reboot_until_the_boot_id_changes(host):
    manifest = host.manifest(IDLE)
    assert host.apply(manifest).code == 2
    _marker(host)

    first = host.apply(manifest)
    assert first.code == 16, first.out
    assert first.field("host state") == "awaiting-reboot"
    assert first.field("reason") == "/run/reboot-required present (linux-image-6.1.0-18-amd64)"
    again = host.apply(manifest)
    assert again.code == 16
    status = host.status("--json").json
    assert status["state"] == "awaiting-reboot"
    assert status["reboot"]["bootId"] == "boot-1"
    assert status["reboot"]["policy"] == "never"

    host.reboot("boot-2")  # the marker survives in a root, but this reboot satisfied it
    after = host.apply(manifest)
    assert after.code == 0, after.out
    assert after.field("host state") == "converged"

    os.utime(host.root / "run/reboot-required", ns=(1, 10**18))  # a new need, in this boot
    assert host.apply(manifest).code == 16


def test_marker_seen_in_observe_mode_too(host):
    _marker(host, pkgs="")
    result = host.apply(host.manifest(IDLE), "--mode", "observe")
    assert result.code == 8 | 16
    assert result.field("host state") == "drifted"  # drift outranks awaiting-reboot


def test_status_notes_a_reboot_since_the_last_pass(host):
    _marker(host)
    host.apply(host.manifest(IDLE))
    host.reboot("boot-2")
    status = host.status()
    assert "host state: awaiting-reboot" in status.out
    assert "rebooted since this pass" in status.out


def test_newer_kernel_in_boot(host):
    boot = host.root / "boot"
    boot.mkdir()
    (boot / "vmlinuz-999.1.0-1-amd64").write_bytes(b"")
    result = host.apply(host.manifest(IDLE))
    assert result.code == 2 | 16
    assert result.field("reason").startswith("kernel 999.1.0-1-amd64 in /boot, running ")


def test_kernel_package_update_needs_a_reboot(host, tmp_path):
    dpkg_root(host.root)
    debs = host.base
    build_deb(debs / "v1", "linux-image-datum", "1.0")
    build_deb(debs / "v2", "linux-image-datum", "2.0")
    v1 = host.manifest("resources:\n  - Package[linux-image]:\n      name: linux-image-datum\n      source: v1/linux-image-datum_1.0_all.deb\n", "v1.yaml")
    v2 = host.manifest("resources:\n  - Package[linux-image]:\n      name: linux-image-datum\n      source: v2/linux-image-datum_2.0_all.deb\n      ensure: latest\n", "v2.yaml")

    first = host.apply(v1)
    assert first.line("Package[linux-image]") == "created"
    assert first.code == 2 | 16
    host.reboot("boot-2")
    assert host.apply(v1).code == 0

    upgraded = host.apply(v2)
    assert upgraded.code == 2 | 16, upgraded.out + upgraded.err
    assert upgraded.line("Package[linux-image]") == "updated"
    assert upgraded.field("host state") == "awaiting-reboot"
    assert upgraded.field("reason") == "Package[linux-image] updated, running kernel differs"
    assert (host.root / "usr/share/linux-image-datum/VERSION").read_text() == "2.0\n"
    # The package is converged now; the need persists until the boot id changes.
    idle = host.apply(v2)
    assert idle.code == 16
    assert idle.line("Package[linux-image]") == "converged"
    assert idle.field("reason") == "Package[linux-image] updated, running kernel differs"
    host.reboot("boot-3")
    assert host.apply(v2).code == 0


def _policy(host, policy: str, extra: str = "") -> str:
    flag = host.base / "rebooted"
    host.configure(f'[host]\nreboot_policy = "{policy}"\nreboot_command = "touch {flag}"\n{extra}')
    return str(flag)


@pytest.mark.parametrize(
    ("policy", "extra", "reboots", "action"),
    [
        ("never", "", False, "waiting for a human (reboot_policy never)"),
        ("manual", "", False, "run 'datum reboot' to reboot (reboot_policy manual)"),
        ("automatic", "", True, "rebooting now (reboot_policy automatic)"),
        ("maintenance", 'maintenance_window = "daily 00:00-24:00"\n', True, "rebooting in the maintenance window daily 00:00-24:00"),
    ],
)
def test_reboot_policy(host, policy, extra, reboots, action):
    flag = _policy(host, policy, extra)
    _marker(host)
    result = host.apply(host.manifest(IDLE))
    assert result.code == 2 | 16
    assert os.path.exists(flag) is reboots
    reboot = host.status("--json").json["reboot"]
    assert reboot["policy"] == policy
    assert reboot["action"] == action
    assert ("requestedAt" in reboot) is reboots


def test_maintenance_window_outside_now_waits(host):
    now = datetime.now().astimezone()
    other_day = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"][(now.weekday() + 3) % 7]
    flag = _policy(host, "maintenance", f'maintenance_window = "{other_day} 02:00-04:00"\n')
    _marker(host)
    assert host.apply(host.manifest(IDLE)).code == 2 | 16
    assert not os.path.exists(flag)
    assert host.status("--json").json["reboot"]["action"] == f"reboot in the next maintenance window {other_day} 02:00-04:00"


def test_automatic_reboots_once_per_boot_and_after_the_report_is_persisted(host):
    flag = host.base / "rebooted"
    # The "reboot" copies the state file, so the test sees what was persisted when it ran.
    snapshot = host.base / "at-reboot.db"
    host.configure(f'[host]\nreboot_policy = "automatic"\nreboot_command = "sh -c \'cp {host.state} {snapshot}; touch {flag}\'"\n')
    _marker(host)
    assert host.apply(host.manifest(IDLE)).code == 2 | 16
    assert flag.exists()
    import sqlite3

    row = sqlite3.connect(snapshot).execute("SELECT state FROM agent_reports").fetchone()
    assert row == ("awaiting-reboot",)
    flag.unlink()
    again = host.apply(host.manifest(IDLE))
    assert again.code == 16
    assert not flag.exists()  # already requested in this boot
    assert host.status("--json").json["reboot"]["action"] == "reboot already requested in this boot; waiting for it"


def test_failed_reboot_command_is_recorded_and_retried(host):
    host.configure('[host]\nreboot_policy = "automatic"\nreboot_command = "false"\n')
    _marker(host)
    result = host.apply(host.manifest(IDLE))
    assert result.code == 2 | 16  # a failed reboot is not a failed pass
    assert "the reboot command failed" in result.err
    reboot = host.status("--json").json["reboot"]
    assert reboot["action"].startswith("the reboot command failed")
    assert "requestedAt" not in reboot


def test_manual_reboot_command(host):
    flag = _policy(host, "manual")
    nothing = host.datum("reboot", "--state", str(host.state))
    assert nothing.code == 0 and "no reboot is needed" in nothing.out
    assert not os.path.exists(flag)
    _marker(host)
    host.apply(host.manifest(IDLE))
    assert not os.path.exists(flag)
    done = host.datum("reboot", "--state", str(host.state))
    assert done.code == 0, done.out + done.err
    assert os.path.exists(flag)
    assert host.status("--json").json["reboot"]["action"] == "reboot requested by 'datum reboot'"


def test_observe_mode_never_reboots(host):
    flag = _policy(host, "automatic")
    _marker(host)
    result = host.apply(host.manifest(IDLE), "--mode", "observe")
    assert result.code == 8 | 16
    assert not os.path.exists(flag)
    reboot = host.status("--json").json["reboot"]
    assert reboot["action"] == "none in observe mode; an enforce pass applies the reboot policy"
    assert "requestedAt" not in reboot

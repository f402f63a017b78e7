"""Reboot policy as tables: maintenance windows, decisions, and when an earlier need still holds."""

from __future__ import annotations

from datetime import datetime

import pytest

from datum.config import parse_window
from datum.core.vocab import RebootPolicy
from datum.host.reboot import Found, decide, in_window, newer_kernel, still_needed

# 2026-11-29 is a Sunday.
SUN_0300 = datetime(2026, 11, 29, 3, 0)
SUN_0400 = datetime(2026, 11, 29, 4, 0)
MON_0030 = datetime(2026, 11, 30, 0, 30)
WED_1200 = datetime(2026, 12, 2, 12, 0)


@pytest.mark.parametrize(
    ("window", "now", "inside"),
    [
        ("Sun 02:00-04:00", SUN_0300, True),
        ("Sun 02:00-04:00", SUN_0400, False),  # the end is exclusive
        ("Sun 02:00-04:00", WED_1200, False),
        ("Mon-Fri 11:00-13:00", WED_1200, True),
        ("Sat,Sun 02:00-05:00", SUN_0300, True),
        ("Sun 23:00-01:00", MON_0030, True),  # past midnight, into Monday
        ("Sat 23:00-01:00", MON_0030, False),
        ("daily 00:00-24:00", WED_1200, True),
        ("12:00-12:30", WED_1200, True),
        ("Fri-Mon 02:00-04:00", SUN_0300, True),
    ],
)
def test_in_window(window, now, inside):
    assert in_window(window, now) is inside


@pytest.mark.parametrize("window", ["Sun", "Funday 02:00-04:00", "Sun 25:00-26:00", "Sun 02:00-02:00", "02:00"])
def test_bad_windows(window):
    with pytest.raises(ValueError):
        parse_window(window)


@pytest.mark.parametrize(
    ("policy", "now", "already", "reboot_now"),
    [
        (RebootPolicy.NEVER, SUN_0300, False, False),
        (RebootPolicy.MANUAL, SUN_0300, False, False),
        (RebootPolicy.MAINTENANCE, SUN_0300, False, True),
        (RebootPolicy.MAINTENANCE, WED_1200, False, False),
        (RebootPolicy.AUTOMATIC, WED_1200, False, True),
        (RebootPolicy.AUTOMATIC, WED_1200, True, False),
    ],
)
def test_decide(policy, now, already, reboot_now):
    assert decide(policy, "Sun 02:00-04:00", now, already).reboot_now is reboot_now


def test_configuration_rejects_maintenance_without_a_window(tmp_path):
    from datum.config import load_settings
    from datum.core.findings import Problem

    config = tmp_path / "c.toml"
    config.write_text('[host]\nreboot_policy = "maintenance"\n')
    with pytest.raises(Problem):
        load_settings(config)


MARK = "/run/reboot-required"


@pytest.mark.parametrize(
    ("found", "previous", "boot", "reasons"),
    [
        (Found((), {}), None, "b1", []),
        (Found(("x updated, y",), {}), None, "b1", ["x updated, y"]),
        (Found((), {}), {"reboot": {"required": True, "reason": "x updated, y", "bootId": "b1"}}, "b1", ["x updated, y"]),
        (Found((), {}), {"reboot": {"required": True, "reason": "x updated, y", "bootId": "b1"}}, "b2", []),
        (Found((f"{MARK} present",), {MARK: 5}), {"reboot": {"required": True, "reason": f"{MARK} present", "bootId": "b1", "markers": {MARK: 5}}}, "b2", []),
        (Found((f"{MARK} present",), {MARK: 6}), {"reboot": {"required": True, "reason": f"{MARK} present", "bootId": "b1", "markers": {MARK: 5}}}, "b2", [f"{MARK} present"]),
    ],
)
def test_still_needed(found, previous, boot, reasons):
    assert still_needed(found, previous, boot)[0] == reasons


@pytest.mark.parametrize(
    ("kernels", "running", "newer"),
    [
        ([], "6.1.0-18-amd64", None),
        (["6.1.0-18-amd64"], "6.1.0-18-amd64", None),
        (["6.1.0-18-amd64", "6.1.0-20-amd64"], "6.1.0-18-amd64", "6.1.0-20-amd64"),
        (["6.1.0-9-amd64"], "6.1.0-18-amd64", None),  # numeric, not lexical
    ],
)
def test_newer_kernel(tmp_path, kernels, running, newer):
    (tmp_path / "boot").mkdir()
    for k in kernels:
        (tmp_path / "boot" / f"vmlinuz-{k}").touch()
    assert newer_kernel(tmp_path, running) == newer

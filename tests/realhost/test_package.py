"""``Package`` from the Debian mirror, inside the container, through apt and dpkg.

The cached root has bookworm's lists only; ``apt_lists`` fetches bookworm-updates
and bookworm-security too, so tzdata has three versions to choose from.
"""

from __future__ import annotations

import pytest
from container import by_id, summary


@pytest.fixture(scope="module")
def apt_lists(host):
    host.run("apt-get", "update", "-q", timeout=300)
    return host


# A reboot need lasts until the boot id changes: these passes keep their own state store.
REBOOT_STATE = ("--state", "/var/lib/datum/reboot-kernel.db")


def installed(host, name: str) -> str | None:
    done = host.run("dpkg-query", "-W", "-f=${Status}\t${Version}", name, check=False)
    status, _, version = done.stdout.partition("\t")
    return version if status.endswith(" installed") else status or None


def versions(host, name: str) -> list[str]:
    out = host.run("apt-cache", "madison", name).stdout
    return [line.split("|")[1].strip() for line in out.splitlines()]


def test_installed_from_the_repository_then_idle(apt_lists):
    host = apt_lists
    manifest = "resources:\n  - Package[hello]:\n      ensure: installed\n"
    code, report = host.apply(manifest)
    assert code == 2, summary(report)
    assert by_id(report)["Package[hello]"]["action"] == "create"
    assert installed(host, "hello")
    assert host.run("hello").stdout.strip() == "Hello, world!"
    code, report = host.apply(manifest)
    assert code == 0, summary(report)


def test_a_pinned_version_then_latest_upgrades(apt_lists):
    host = apt_lists
    available = versions(host, "tzdata")
    assert len(available) >= 2, available
    newest, oldest = available[0], available[-1]
    code, report = host.apply(f"resources:\n  - Package[tzdata]:\n      ensure: {oldest}\n")
    assert code == 2, summary(report)
    assert installed(host, "tzdata") == oldest
    code, report = host.apply(f"resources:\n  - Package[tzdata]:\n      ensure: {oldest}\n")
    assert code == 0, summary(report)
    # Observe mode says what latest would do, and does nothing.
    manifest = "resources:\n  - Package[tzdata]:\n      ensure: latest\n"
    code, report = host.apply(manifest, mode="observe")
    assert code == 8, summary(report)
    assert f"want latest {newest}" in by_id(report)["Package[tzdata]"]["reason"]
    assert installed(host, "tzdata") == oldest
    code, report = host.apply(manifest)
    assert code == 2, summary(report)
    assert installed(host, "tzdata") == newest
    code, report = host.apply(manifest)
    assert code == 0, summary(report)


def test_absent_removes_and_purged_removes_the_configuration_too(apt_lists):
    host = apt_lists
    code, report = host.apply("resources:\n  - Package[netbase]:\n      ensure: installed\n")
    assert code == 2, summary(report)
    assert host.run("test", "-f", "/etc/protocols", check=False).returncode == 0
    code, report = host.apply("resources:\n  - Package[netbase]:\n      ensure: absent\n")
    assert code == 2, summary(report)
    # Removed, its configuration files left: absent is satisfied, purged is not.
    assert installed(host, "netbase") == "deinstall ok config-files"
    assert host.run("test", "-f", "/etc/protocols", check=False).returncode == 0
    code, report = host.apply("resources:\n  - Package[netbase]:\n      ensure: absent\n")
    assert code == 0, summary(report)
    code, report = host.apply(
        "resources:\n  - Package[netbase]:\n      ensure: purged\n", mode="observe"
    )
    assert code == 8, summary(report)
    assert "configuration files left, want purged" in by_id(report)["Package[netbase]"]["reason"]
    code, report = host.apply("resources:\n  - Package[netbase]:\n      ensure: purged\n")
    assert code == 2, summary(report)
    assert installed(host, "netbase") is None
    assert host.run("test", "-e", "/etc/protocols", check=False).returncode != 0
    code, report = host.apply("resources:\n  - Package[netbase]:\n      ensure: purged\n")
    assert code == 0, summary(report)


def test_an_unknown_package_is_failed_with_apts_message(apt_lists):
    host = apt_lists
    code, report = host.apply("resources:\n  - Package[datum-no-such-package]:\n      ensure: installed\n")
    assert code == 4, summary(report)
    line = by_id(report)["Package[datum-no-such-package]"]
    assert line["state"] == "failed"
    assert "Unable to locate package datum-no-such-package" in line["reason"]


def test_a_kernel_package_signals_a_reboot(host):
    """A real linux-image is ~70 MB with initramfs-tools; a marker package named like one,
    built with dpkg-deb inside, takes the same path (the name is what signals)."""
    host.sh(
        "d=/srv/work/kpkg; mkdir -p $d/DEBIAN $d/boot; "
        "printf 'Package: linux-image-datum-test\\nVersion: 1.0\\nArchitecture: all\\n"
        "Maintainer: datum <datum@example.org>\\nDescription: a kernel marker for tests\\n' "
        "> $d/DEBIAN/control; echo marker > $d/boot/datum-test-marker; "
        "dpkg-deb -b $d /srv/work/linux-image-datum-test_1.0_all.deb >/dev/null"
    )
    manifest = (
        "resources:\n  - Package[linux-image-datum-test]:\n"
        "      source: linux-image-datum-test_1.0_all.deb\n"
    )
    code, report = host.apply(manifest, extra=REBOOT_STATE)
    assert code == 2 | 16, summary(report)
    assert report["state"] == "awaiting-reboot"
    assert "running kernel differs" in report["reason"]
    assert by_id(report)["Package[linux-image-datum-test]"]["rebootRequired"]


def test_reboot_true_on_any_package_signals_a_reboot(apt_lists):
    host = apt_lists
    code, report = host.apply(
        "resources:\n  - Package[sl]:\n      ensure: installed\n      reboot: true\n",
        extra=("--state", "/var/lib/datum/reboot-sl.db"),
    )
    assert code == 2 | 16, summary(report)
    assert report["state"] == "awaiting-reboot"

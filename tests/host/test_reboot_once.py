"""``automatic`` reboots at most once for one need: a kernel the machine does not boot is no reboot loop.

Only the reboot command is faked: it counts itself and "comes back" with a
new boot id (``boot_id_file``), on the same running kernel, as a machine whose
default boot entry is pinned to it (or that fell back to it) would.
"""

from __future__ import annotations

import os

import pytest

from datum.host.reboot import kernel_reason, not_booted

IDLE = "resources:\n  - File[/etc/motd]:\n      content: 'hi\\n'\n"
RUNNING = os.uname().release


def _machine(host) -> tuple[object, object]:
    count = host.base / "reboots"
    fake = host.base / "fake-reboot"
    fake.write_text(f'#!/bin/sh\necho x >> {count}\necho "boot-after-$(wc -l < {count})" > {host.boot_id}\n')
    fake.chmod(0o755)
    host.configure(f'[host]\nreboot_policy = "automatic"\nreboot_command = "{fake}"\n')
    (host.root / "boot").mkdir()
    return count, lambda: len(count.read_text().splitlines()) if count.exists() else 0


def test_automatic_reboots_once_for_a_kernel_the_machine_does_not_boot_into(host):
    _count, reboots = _machine(host)
    (host.root / "boot/vmlinuz-999.1.0-1-amd64").write_bytes(b"")
    manifest = host.manifest(IDLE)

    first = host.apply(manifest)
    assert first.code == 2 | 16, first.out + first.err
    assert reboots() == 1
    said = f"rebooted into {RUNNING}, newer kernel 999.1.0-1-amd64 is not the default boot entry"
    for _ in range(3):  # back on the old kernel: never again, however many passes
        again = host.apply(manifest)
        assert again.code == 16, again.out + again.err
        assert again.field("host state") == "awaiting-reboot"
        assert again.field("reason") == said
        assert reboots() == 1
    reboot = host.status("--json").json["reboot"]
    assert reboot["kernel"] == "999.1.0-1-amd64"
    assert reboot["attempted"]["kernel"] == "999.1.0-1-amd64" and reboot["attempted"]["bootId"] == "boot-1"
    assert reboot["action"].startswith("not rebooting again for kernel 999.1.0-1-amd64")
    assert "requestedAt" not in reboot

    host.reboot("boot-by-a-human")  # and back on the old kernel again
    assert host.apply(manifest).code == 16
    assert reboots() == 1

    (host.root / "boot/vmlinuz-999.2.0-1-amd64").write_bytes(b"")  # a new need: one reboot for it
    assert host.apply(manifest).code == 16
    assert reboots() == 2
    assert host.apply(manifest).code == 16
    assert host.apply(manifest).code == 16
    assert reboots() == 2


def test_a_new_marker_still_reboots_once_while_the_kernel_does_not_boot(host):
    _count, reboots = _machine(host)
    (host.root / "boot/vmlinuz-999.1.0-1-amd64").write_bytes(b"")
    manifest = host.manifest(IDLE)
    host.apply(manifest)
    host.apply(manifest)
    assert reboots() == 1
    (host.root / "run").mkdir()
    (host.root / "run/reboot-required").write_text("")  # a need of its own, found after that reboot
    result = host.apply(manifest)
    assert result.code == 16
    assert reboots() == 2
    assert "rebooted into" in result.field("reason") and "/run/reboot-required present" in result.field("reason")
    assert host.apply(manifest).code == 16  # the marker is stale after its reboot; the kernel is not retried
    assert reboots() == 2


K = "9.9"
REASON = kernel_reason(K, "6.1")
SAID = f"rebooted into 6.1, newer kernel {K} is not the default boot entry"


@pytest.mark.parametrize(
    ("before", "boot", "reasons", "attempted"),
    [
        ({}, "b1", [REASON], None),
        ({"requestedAt": "t", "kernel": K, "bootId": "b1"}, "b1", [REASON], None),  # not rebooted yet
        ({"requestedAt": "t", "kernel": K, "bootId": "b1"}, "b2", [SAID], {"kernel": K, "requestedAt": "t", "bootId": "b1"}),
        ({"requestedAt": "t", "kernel": "9.8", "bootId": "b1"}, "b2", [REASON], None),  # another kernel
        ({"attempted": {"kernel": K, "requestedAt": "t", "bootId": "b1"}}, "b3", [SAID], {"kernel": K, "requestedAt": "t", "bootId": "b1"}),
    ],
)
def test_not_booted(before, boot, reasons, attempted):
    assert not_booted([REASON], K, "6.1", before, boot) == (reasons, attempted)

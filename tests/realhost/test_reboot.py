"""A reboot end to end: ``automatic`` policy, a marker, the reboot command, a new boot id.

systemd-nspawn gives each boot of a container a boot id of its own, and a
``systemctl reboot`` inside makes it exit 133, "boot me again": the harness
boots the cached root again, with the agent's state directory bound from the
host so it survives, as /var/lib does on a real disk.
"""

from __future__ import annotations

import json

from container import DATUM, Container

STATE = "/var/lib/datum-keep"
ENV = {"DATUM_HOME": STATE, "DATUM_CONFIG": f"{STATE}/datum.toml"}
MARKER = """
resources:
  - File[/run/reboot-required]:
      content: "*** System restart required ***\\n"
  - File[/run/reboot-required.pkgs]:
      content: "linux-image-datum-test\\n"
"""
QUIET = "resources:\n  - File[/etc/after-reboot]:\n      content: \"ok\\n\"\n"


def status(box: Container) -> dict:
    return json.loads(box.run(DATUM, "status", "--json", env=ENV, check=False).stdout)


def test_automatic_policy_reboots_once_and_the_new_boot_clears_the_need(host, tmp_path):
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "datum.toml").write_text('[host]\nreboot_policy = "automatic"\n')
    box = Container(binds={keep: STATE})
    box.boot()
    try:
        box.install_datum()  # the shared virtualenv is already there: a check only
        first_boot = box.run("cat", "/proc/sys/kernel/random/boot_id").stdout.strip()
        (box.work / "marker.yaml").write_text(MARKER)
        # The pass persists its report, then runs `systemctl reboot`: the container goes down
        # under it, so its own exit is not waited for here.
        box.run(DATUM, "apply", "/srv/work/marker.yaml", env=ENV, check=False, timeout=120)
        box.rebooted()
        second_boot = box.run("cat", "/proc/sys/kernel/random/boot_id").stdout.strip()
        assert second_boot != first_boot
        before = status(box)
        report = before  # the persisted report of the pass before the reboot, as it was
        assert report["state"] == "awaiting-reboot", before
        reboot = report["reboot"]
        assert reboot["action"] == "rebooting now (reboot_policy automatic)", reboot
        assert reboot["requestedAt"] and reboot["bootId"] == first_boot
        assert "linux-image-datum-test" in json.dumps(report)
        # The first pass of the new boot: the need is gone (the marker was on /run, a tmpfs).
        (box.work / "quiet.yaml").write_text(QUIET)
        done = box.run(DATUM, "apply", "/srv/work/quiet.yaml", "--json", env=ENV, check=False)
        after = json.loads(done.stdout)
        assert after["state"] == "converged", after
        assert done.returncode == 2
        assert after["bootId"] == second_boot
    finally:
        box.shutdown()

"""A reboot marker the host has rebooted since stays stale: it never brings the need back.

On a real host ``/run`` is a tmpfs and the marker is gone after the reboot; in a
root (a container, an image) it stays. The pass after the reboot forgives it;
every pass after that must too, or an ``automatic`` policy reboots every other
pass.
"""

from __future__ import annotations

import json


def test_a_stale_marker_stays_stale_pass_after_pass(host):
    (host.root / "run").mkdir()
    (host.root / "run" / "reboot-required").write_text("*** System restart required ***\n")
    manifest = host.manifest('resources:\n  - File[/srv/a]:\n      content: "a\\n"\n')
    first = host.apply(manifest, "--json")
    assert json.loads(first.out)["state"] == "awaiting-reboot"
    host.reboot("boot-2")
    for n in range(4):
        done = host.apply(manifest, "--json")
        report = json.loads(done.out)
        assert report["state"] == "converged" and done.code == 0, (n, report.get("reboot"))
    (host.root / "run" / "reboot-required").write_text("*** again ***\n")  # a new need
    import os
    os.utime(host.root / "run" / "reboot-required", ns=(1, 1))
    again = json.loads(host.apply(manifest, "--json").out)
    assert again["state"] == "awaiting-reboot"

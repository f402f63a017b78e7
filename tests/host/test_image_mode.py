"""Image mode (issue 21, item 8): on a host whose ``/usr`` is read-only (bootc, ostree), a resource
under it that differs is ``skipped`` with reason ``image_mode``, never written nor failed, and the
host is ``degraded``. Here /usr of a temporary root is a tmpfs remounted read-only;
tests/realhost/test_image_mode.py does it on a booted Debian."""

from __future__ import annotations

import subprocess

MANIFEST = """
resources:
  - File[/usr/share/app/VERSION]:
      content: "2\\n"
  - File[/usr/share/app/same]:
      content: "same\\n"
  - File[/etc/app.conf]:
      content: "x\\n"
"""


def test_a_difference_under_a_read_only_usr_is_skipped_image_mode_and_the_host_degraded(host, tmpfs):
    usr = host.root / "usr"
    tmpfs(usr)
    (usr / "share/app").mkdir(parents=True)
    (usr / "share/app/VERSION").write_text("1\n")
    (usr / "share/app/same").write_text("same\n")
    subprocess.run(["mount", "-o", "remount,ro", str(usr)], check=True)
    run = host.apply(host.manifest(MANIFEST), "--json")
    assert run.code == 2 | 32, run.out + run.err
    report = run.json
    lines = {r["id"]: r for r in report["resources"]}
    assert (lines["File[/usr/share/app/VERSION]"]["state"], lines["File[/usr/share/app/VERSION]"]["reason"]) == (
        "skipped", "image_mode"
    )
    assert lines["File[/usr/share/app/same]"]["state"] == "converged"  # in place: nothing to say
    assert lines["File[/etc/app.conf]"]["state"] == "converged"
    assert report["state"] == "degraded"
    assert (usr / "share/app/VERSION").read_text() == "1\n"
    observed = host.apply(host.manifest(MANIFEST), "--mode", "observe")
    assert observed.line("File[/usr/share/app/VERSION]") == "skipped: image_mode"
    subprocess.run(["mount", "-o", "remount,rw", str(usr)], check=True)
    assert host.apply(host.manifest(MANIFEST)).code == 2  # writable again: written
    assert (usr / "share/app/VERSION").read_text() == "2\n"

"""Image mode on a booted Debian (issue 21, item 8): /usr bound read-only onto itself inside the
container, as an image-mode host (bootc, ostree) boots it; a File under it that differs reads
``skipped: image_mode``, nothing there is written, and the host is ``degraded``."""

from __future__ import annotations

from container import by_id, summary

MANIFEST = """
resources:
  - File[/usr/local/share/datum-image/VERSION]:
      content: "from the manifest\\n"
  - File[/etc/datum-image.conf]:
      content: "x\\n"
"""


def test_a_difference_under_a_read_only_usr_is_skipped_not_failed(host):
    host.sh("mkdir -p /usr/local/share/datum-image && echo 'from the image' > /usr/local/share/datum-image/VERSION")
    host.sh("mount --bind /usr /usr && mount -o remount,bind,ro /usr")
    try:
        assert host.sh("touch /usr/datum-probe", check=False).returncode != 0  # read-only indeed
        code, report = host.apply(MANIFEST)
        assert code == 2 | 32, summary(report)
        line = by_id(report)["File[/usr/local/share/datum-image/VERSION]"]
        assert (line["state"], line["reason"]) == ("skipped", "image_mode"), summary(report)
        assert by_id(report)["File[/etc/datum-image.conf]"]["state"] == "converged"
        assert report["state"] == "degraded"
        assert "image_mode" in report["reason"]
        assert host.run("cat", "/usr/local/share/datum-image/VERSION").stdout == "from the image\n"
    finally:
        host.sh("umount -l /usr")  # lazily: the running services hold files under it

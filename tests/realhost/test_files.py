"""``File`` ``validate`` with the command users reach for: ``visudo -cf %s``."""

from __future__ import annotations

import json

from container import by_id, summary

GOOD = "Defaults:datum !lecture\n"
BAD = "this is not sudoers syntax\n"


def manifest(text: str) -> str:
    return f"""
resources:
  - File[sudoers-datum]:
      path: /etc/sudoers.d/datum
      content: {json.dumps(text)}
      mode: "0440"
      validate: "visudo -cf %s"
"""


def test_visudo_rejects_bad_content_and_the_old_file_stays(host):
    if host.run("test", "-x", "/usr/sbin/visudo", check=False).returncode != 0:
        host.run("apt-get", "install", "-y", "-q", "sudo", timeout=300)
    code, report = host.apply(manifest(GOOD))
    assert code == 2, summary(report)
    assert host.run("cat", "/etc/sudoers.d/datum").stdout == GOOD
    # Observe says what apply would refuse; apply refuses; the file is as it was.
    code, report = host.apply(manifest(BAD), mode="observe")
    assert by_id(report)["File[sudoers-datum]"]["state"] == "failed", summary(report)
    code, report = host.apply(manifest(BAD))
    assert code == 4, summary(report)
    reason = by_id(report)["File[sudoers-datum]"]["reason"]
    assert reason.startswith("validate rejected the content: visudo -cf %s exited 1"), reason
    assert host.run("cat", "/etc/sudoers.d/datum").stdout == GOOD
    assert host.run("visudo", "-c", check=False).returncode == 0

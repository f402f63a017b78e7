"""A full disk under the root: the File that does not fit fails with the real error, nothing else is lost.

The root is a 1 MiB tmpfs (mounted as root; skipped where mounting is refused).
A File bigger than the space fails at that resource with ``No space left on
device``; the old file at its path stays byte for byte; no temporary file is
left behind; the resources after it still run.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def full_root(host, tmpfs):
    """``host.root`` as a 1 MiB tmpfs."""
    tmpfs(host.root, "1m")
    return host


def test_a_file_bigger_than_the_disk_fails_and_keeps_the_old_file(full_root):
    host = full_root
    etc = host.root / "etc"
    etc.mkdir()
    old = os.urandom(300 * 1024)
    (etc / "big").write_bytes(old)
    os.chmod(etc / "big", 0o640)
    (host.base / "big.bin").write_bytes(
        b"new content\n" * (1 << 17)
    )  # 1.5 MiB, beside the manifest
    manifest = host.manifest(
        """
resources:
  - File[/etc/big]:
      source: big.bin
      mode: "0644"
  - File[/etc/small]:
      content: "fits\\n"
  - Directory[/srv]: {}
"""
    )
    run = host.apply(manifest)
    assert run.code & 4, run.out + run.err  # a resource failed
    assert "No space left on device" in run.line("File[/etc/big]"), run.out
    assert run.line("File[/etc/big]").startswith("failed")
    assert run.line("File[/etc/small]") == "created"
    assert run.line("Directory[/srv]") == "created"
    assert (etc / "big").read_bytes() == old
    assert oct((etc / "big").stat().st_mode & 0o7777) == oct(0o640)
    assert (etc / "small").read_text() == "fits\n"
    assert sorted(os.listdir(etc)) == ["big", "small"]  # no .datum-tmp-* left
    report = host.status("--json").json
    big = next(r for r in report["resources"] if r["id"] == "File[/etc/big]")
    assert big["state"] == "failed" and "No space left on device" in big["error"]

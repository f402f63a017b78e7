"""A reboot marker that cannot be read is a reason that says so: never a crash, never a hang.

Debian's ``/run/reboot-required`` and its ``.pkgs`` list are read under the
root; a FIFO, a device or a directory at the list, or a marker whose link
leads out of the root, used to raise out of ``detect`` and crash the pass.
"""

from __future__ import annotations

import os
import stat

import pytest

from datum.host import reboot as rb

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mknod)")


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "root"
    (root / "var").mkdir(parents=True)
    (root / "run").mkdir()
    (root / "var" / "run").symlink_to("/run")
    (root / "run" / "reboot-required").write_text("*** System restart required ***\n")
    return root


def _special(path, what):
    if what == "fifo":
        os.mkfifo(path)
    elif what == "directory":
        path.mkdir()
    elif what == "device":
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero: endless
    elif what == "link out":
        path.symlink_to(path.parent.parent.parent / "outside" / "pkgs")


@pytest.mark.parametrize(
    "what", ["fifo", "directory", pytest.param("device", marks=needs_root), "link out"]
)
def test_an_unreadable_pkgs_list_is_a_reason_not_a_crash(root, what, deadline):
    if what == "link out":
        (root.parent / "outside").mkdir()
        (root.parent / "outside" / "pkgs").write_text("from the running system\n")
    _special(root / "run" / "reboot-required.pkgs", what)
    found = rb.detect(root, "6.1.0-18-amd64", [])
    assert len(found.reasons) == 1, found.reasons  # /run and /var/run are one marker
    reason = found.reasons[0]
    assert reason.startswith(
        "/run/reboot-required present (/run/reboot-required.pkgs could not be read: "
    )
    assert "from the running system" not in reason
    assert found.markers == {
        "/run/reboot-required": (root / "run" / "reboot-required").lstat().st_mtime_ns
    }


def test_a_fifo_at_the_var_run_list_alone(tmp_path, deadline):
    root = tmp_path / "root"
    (root / "var" / "run").mkdir(parents=True)
    (root / "var" / "run" / "reboot-required").write_text("")
    os.mkfifo(root / "var" / "run" / "reboot-required.pkgs")
    found = rb.detect(root, "6.1", [])
    assert found.reasons == (
        "/var/run/reboot-required present (/var/run/reboot-required.pkgs could not be read: "
        "/var/run/reboot-required.pkgs is a fifo, not a regular file; refusing to read it)",
    )


def test_a_marker_linking_out_of_the_root_is_reported_once_per_boot(tmp_path, deadline):
    root = tmp_path / "root"
    (root / "run").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "marker").write_text("")
    (root / "run" / "reboot-required").symlink_to(tmp_path / "outside" / "marker")
    found = rb.detect(root, "6.1", [])
    assert len(found.reasons) == 1
    assert found.reasons[0].startswith("/run/reboot-required present but could not be read (")
    assert "links out of the root" in found.reasons[0]
    # Remembered like a readable marker: after a reboot the same link is not a new need.
    previous = {"reboot": {"required": True, "bootId": "boot-1", "markers": found.markers}}
    reasons, _markers, _ = rb.still_needed(rb.detect(root, "6.1", []), previous, "boot-2")
    assert reasons == []


def test_a_run_directory_linking_out_of_the_root_is_reported(tmp_path, deadline):
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "outside-run").mkdir()
    (tmp_path / "outside-run" / "reboot-required").write_text("")
    (root / "run").symlink_to(tmp_path / "outside-run")
    found = rb.detect(root, "6.1", [])
    assert [r.split(" (")[0] for r in found.reasons] == [
        "/run/reboot-required present but could not be read"
    ]
    assert "links out of the root" in found.reasons[0]


def test_a_marker_under_a_file_is_absent(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "run").write_text("not a directory")
    assert rb.detect(root, "6.1", []).reasons == ()


def test_a_boot_that_links_out_of_the_root_has_no_newer_kernel(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "boot").mkdir()
    (tmp_path / "boot" / "vmlinuz-99.0").write_text("")
    (root / "boot").symlink_to(tmp_path / "boot")
    assert rb.newer_kernel(root, "6.1") is None


def test_a_pass_with_a_fifo_list_finishes_and_says_why(host):
    """A real ``datum apply`` (its own timeout is the deadline)."""
    run = host.root / "run"
    run.mkdir(parents=True, exist_ok=True)
    (run / "reboot-required").write_text("")
    os.mkfifo(run / "reboot-required.pkgs")
    manifest = host.manifest("resources:\n  - File[/etc/motd]:\n      content: 'hi\\n'\n")
    result = host.apply(manifest)
    assert result.code == 2 | 16, result.out + result.err
    assert result.field("host state") == "awaiting-reboot"
    assert "/run/reboot-required.pkgs could not be read" in result.field("reason")

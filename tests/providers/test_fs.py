"""Paths under a root (chroot-like, escapes refused) and atomic writes."""

from __future__ import annotations

import os
import stat

import pytest

from datum.providers.fs import write_atomic
from datum.providers.reads import Escape, real_path


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    (r / "etc").mkdir(parents=True)
    (r / "run").mkdir()
    (r / "var").mkdir()
    (r / "var" / "run").symlink_to("/run")
    (r / "etc" / "alt").symlink_to("../run")
    (r / "etc" / "out").symlink_to("../../outside")
    (r / "etc" / "abs-out").symlink_to("/../../outside")
    (r / "etc" / "loop").symlink_to("loop")
    (r / "etc" / "link-to-file").symlink_to("hosts")
    (tmp_path / "outside").mkdir()
    (r / "etc" / "real-out").symlink_to(tmp_path / "outside")  # an absolute link to a real place outside
    (r / "etc" / "real-in").symlink_to(r / "run")  # an absolute link naming the root by its real path
    return r


@pytest.mark.parametrize(
    ("host_path", "follow_last", "expected"),
    [
        ("/etc/hosts", True, "etc/hosts"),
        ("/var/run/x.pid", True, "run/x.pid"),  # an absolute link resolves inside the root
        ("/etc/alt/x", True, "run/x"),  # a relative link that stays inside
        ("/etc/link-to-file", True, "etc/hosts"),
        ("/etc/real-in/x", True, "run/x"),
        ("/etc/link-to-file", False, "etc/link-to-file"),  # the link itself
        ("/new/dir/file", True, "new/dir/file"),  # not there yet
        ("/", True, ""),
    ],
)
def test_resolve_inside(root, host_path, follow_last, expected):
    assert real_path(str(root), host_path, follow_last=follow_last) == str(root / expected if expected else root)


@pytest.mark.parametrize(
    "host_path", ["/etc/out/x", "/etc/out", "/etc/abs-out/x", "/etc/loop/x", "/etc/real-out/x"]
)
def test_resolve_refuses_escapes(root, host_path):
    with pytest.raises(Escape):
        real_path(str(root), host_path)


def test_resolve_cache_gives_the_same_answers(root):
    cache: dict[str, str] = {}
    for p in ("/var/run/a", "/var/run/b", "/etc/alt/c", "/etc/hosts"):
        assert real_path(str(root), p, cache=cache) == real_path(str(root), p)
    assert cache  # parents were remembered


def test_write_atomic_creates_with_mode_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "d" / "f.conf"
    write_atomic(target, b"one\n", mode=0o640)
    assert target.read_bytes() == b"one\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    write_atomic(target, b"two\n")  # keeps the mode it had
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert target.read_bytes() == b"two\n"
    assert os.listdir(target.parent) == ["f.conf"]


def test_write_atomic_failure_keeps_the_old_file(tmp_path):
    target = tmp_path / "f"
    write_atomic(target, b"old")
    with pytest.raises(TypeError):
        write_atomic(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f"]

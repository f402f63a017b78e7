"""The one safe unpacker (``datum.unpack``) refuses what either of its callers refused before: a member
escaping the target (agent/fetch and fleet/snapshot alike), a link followed out of it, more bytes than
the bound; and ``datum.agent.fetch`` and ``datum.fleet.rollouts.snapshot`` both write through it."""

from __future__ import annotations

import os

import pytest

from datum.unpack import Link, Refused, outside, unpack


@pytest.fixture
def target(tmp_path):
    (tmp_path / "target").mkdir()
    (tmp_path / "outside").mkdir()
    fd = os.open(tmp_path / "target", os.O_RDONLY | os.O_DIRECTORY)
    yield tmp_path, fd
    os.close(fd)


def _everything(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(top, n), root) for top, dirs, files in os.walk(root) for n in dirs + files)


def test_it_writes_files_and_links_as_given(target):
    base, fd = target
    unpack(fd, [("a/b/c.txt", b"one"), ("top", b""), ("a/here", Link("b/c.txt"))], limit=3)
    assert (base / "target/a/b/c.txt").read_bytes() == b"one"
    assert os.readlink(base / "target/a/here") == "b/c.txt"
    assert oct(os.stat(base / "target/a/b/c.txt").st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("name", ["../x", "/etc/x", "a/../../x", "a//b", "./x", "a/", "", "a\0b"])
def test_a_member_escaping_the_target_is_refused_before_anything_is_written(target, name):
    base, fd = target
    with pytest.raises(Refused, match="not a plain path"):
        unpack(fd, [("first", b"1"), (name, b"x")], limit=100)
    assert outside(name)
    assert _everything(base / "target") == [] and _everything(base / "outside") == []


def test_a_link_is_never_followed_out(target):
    """A link the set makes, or one planted in the target, is never written through."""
    base, fd = target
    with pytest.raises(NotADirectoryError):
        unpack(fd, [("out", Link(str(base / "outside"))), ("out/planted", b"x")], limit=100)
    os.symlink(base / "outside", base / "target/dir")
    with pytest.raises(NotADirectoryError):
        unpack(fd, [("dir/planted", b"x")], limit=100)
    os.symlink(base / "outside/leaf", base / "target/leaf")
    with pytest.raises(FileExistsError):
        unpack(fd, [("leaf", b"x")], limit=100)
    assert _everything(base / "outside") == []


def test_more_than_the_bound_is_refused_before_anything_is_written(target):
    base, fd = target
    unpack(fd, [("a", b"12"), ("b", b"34")], limit=4)  # at the bound: written
    with pytest.raises(Refused, match="more than 4 bytes"):
        unpack(fd, [("c", b"12"), ("d", b"345")], limit=4)
    assert _everything(base / "target") == ["a", "b"]


def test_both_callers_write_through_it(monkeypatch, tmp_path):
    """agent/fetch and fleet/snapshot call the one unpacker (a refusal from it reaches each caller)."""
    import datum.unpack
    from datum.fleet.rollouts import snapshot

    seen = []

    def spy(top, files, limit):
        seen.append(limit)
        raise Refused("spied")

    monkeypatch.setattr(datum.unpack, "unpack", spy)
    monkeypatch.setattr(snapshot, "unpack", spy)
    (tmp_path / "fleet").mkdir()
    (tmp_path / "fleet/nodes.yaml").write_text("nodes: []\n")
    with pytest.raises(Refused):
        snapshot.materialize(tmp_path / "home", "r1", snapshot.capture(tmp_path / "fleet"))
    from datum.agent.fetch import MAX_MANIFEST, materialize
    from datum.core.findings import Problem

    body = b'{"digest": "sha256:' + b"0" * 64 + b'", "manifest": {"resources": []}, "files": {"a": "eA=="}}'
    with pytest.raises(Problem, match="spied"):
        materialize(body, tmp_path / "state.db.manifest")
    assert seen == [snapshot.MAX_BYTES, MAX_MANIFEST]

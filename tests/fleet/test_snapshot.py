"""A revision's snapshot (``datum.fleet.snapshot``): every file kept, written back under the home in a fresh
directory, never through a link planted there, and a path that climbs refused."""

from __future__ import annotations

import base64
import json
import os
import zlib
from pathlib import Path

import pytest

from datum.fleet.revision import content_digest
from datum.fleet.snapshot import capture, files_of, folder, materialize, materialized


def _fleet(where: Path) -> Path:
    (where / "templates").mkdir(parents=True)
    (where / "nodes.yaml").write_text("nodes: []\n")
    (where / "templates" / "motd.j2").write_text("{{ greeting }}\n")
    (where / ".git").mkdir()
    (where / ".git" / "HEAD").write_text("ref: x\n")
    return where


def test_a_snapshot_written_back_has_the_same_files_and_digest(tmp_path: Path):
    fleet = _fleet(tmp_path / "fleet")
    copy = materialize(tmp_path / "home", "rev1", capture(fleet))
    assert copy == (tmp_path / "home" / "revisions" / folder("rev1")).resolve()
    assert content_digest(copy) == content_digest(fleet.resolve())  # .git left out of both
    assert not (copy / ".git").exists()
    assert materialize(tmp_path / "home", "rev1", b"not read again") == copy  # once per process


def test_a_copy_removed_under_the_server_is_written_again_not_served_missing(tmp_path: Path):
    import shutil

    fleet = _fleet(tmp_path / "fleet")
    copy = materialize(tmp_path / "home", "rev-gone", capture(fleet))
    assert materialized(tmp_path / "home", "rev-gone") == copy
    shutil.rmtree(tmp_path / "home" / "revisions")  # a cleaned home
    assert materialized(tmp_path / "home", "rev-gone") is None  # asked of the store again, then written
    assert materialize(tmp_path / "home", "rev-gone", capture(fleet)) == copy
    assert content_digest(copy) == content_digest(fleet.resolve())


def test_a_link_planted_where_the_copy_goes_is_replaced_not_followed(tmp_path: Path):
    fleet = _fleet(tmp_path / "fleet")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "home2" / "revisions"
    root.mkdir(parents=True)
    os.symlink(elsewhere, root / folder("rev2"))
    copy = materialize(tmp_path / "home2", "rev2", capture(fleet))
    assert not (root / folder("rev2")).is_symlink() and (copy / "nodes.yaml").is_file()
    assert list(elsewhere.iterdir()) == []


def test_a_link_at_revisions_itself_is_refused(tmp_path: Path):
    fleet = _fleet(tmp_path / "fleet")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "home3").mkdir()
    os.symlink(elsewhere, tmp_path / "home3" / "revisions")
    with pytest.raises(OSError):
        materialize(tmp_path / "home3", "rev3", capture(fleet))
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("bad", ["../x", "/etc/x", "a/../../x", "a//b", "./x", "a\0b"])
def test_a_snapshot_path_that_is_not_plain_is_refused(bad: str):
    blob = zlib.compress(json.dumps([[bad, base64.b64encode(b"x").decode()]]).encode())
    with pytest.raises(ValueError, match="not plain"):
        files_of(blob)

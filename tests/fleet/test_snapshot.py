"""A revision's snapshot (``datum.fleet.rollouts.snapshot``): every file kept, written back under the home in a fresh
directory, never through a link planted there, and a path that climbs refused."""

from __future__ import annotations

import base64
import json
import os
import zlib
from pathlib import Path

import pytest

from datum.fleet.revision import content_digest
from datum.fleet.rollouts.snapshot import capture, files_of, folder, materialize, materialized


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


def test_a_link_out_of_the_directory_is_kept_as_a_link_its_target_never_read(tmp_path: Path):
    """A link to a file of the server's (a token) is kept as the link: the secret reaches neither the store's
    blob nor the copy, whose link composition refuses as it refuses the directory's. A link to a file inside
    is kept as that file; a dangling one as the link."""
    fleet = _fleet(tmp_path / "fleet")
    secret = tmp_path / "server-secrets" / "token"
    secret.parent.mkdir()
    secret.write_text("SERVER-SECRET-TOKEN\n")
    os.symlink(secret, fleet / "motd.txt")
    os.symlink("../server-secrets/token", fleet / "templates" / "relative.txt")  # out, relatively
    os.symlink("templates/motd.j2", fleet / "inside.j2")
    os.symlink(tmp_path / "nowhere", fleet / "dangling")
    blob = capture(fleet)
    assert b"SERVER-SECRET" not in zlib.decompress(blob)
    assert base64.b64encode(b"SERVER-SECRET-TOKEN\n") not in zlib.decompress(blob)
    kept = dict(files_of(blob))
    assert kept["motd.txt"] == str(secret) and kept["templates/relative.txt"] == "../server-secrets/token"
    assert kept["inside.j2"] == b"{{ greeting }}\n" and kept["dangling"] == str(tmp_path / "nowhere")
    copy = materialize(tmp_path / "home", "rev-links", blob)
    assert os.readlink(copy / "motd.txt") == str(secret)  # made, not followed: composition judges it
    assert os.readlink(copy / "templates" / "relative.txt") == "../server-secrets/token"
    assert not (copy / "templates" / "relative.txt").exists()  # out of the copy, and nothing there
    assert (copy / "inside.j2").read_bytes() == b"{{ greeting }}\n" and not (copy / "inside.j2").is_symlink()


def test_a_blob_kept_before_links_were_kept_as_links_still_reads(tmp_path: Path):
    old = zlib.compress(json.dumps([["nodes.yaml", base64.b64encode(b"nodes: []\n").decode()]]).encode())
    assert files_of(old) == [("nodes.yaml", b"nodes: []\n")]


def test_a_link_to_a_directory_inside_is_kept_as_a_link_within_the_copy(tmp_path: Path):
    """A link to a directory of the fleet (``files -> shared``) is kept as a link to the same place within the
    copy, so the copy composes as the directory does; one to a directory outside, as the link, unfollowed."""
    fleet = _fleet(tmp_path / "fleet")
    (fleet / "shared").mkdir()
    (fleet / "shared" / "motd.txt").write_text("shared\n")
    (fleet / "files").symlink_to(fleet / "shared")  # absolute, inside
    (fleet / "templates" / "up").symlink_to("..")  # relative, inside (the top itself)
    outside = tmp_path / "server-secrets"
    outside.mkdir()
    (outside / "token").write_text("SERVER-SECRET-TOKEN\n")
    (fleet / "secrets").symlink_to(outside)
    blob = capture(fleet)
    assert b"SERVER-SECRET" not in zlib.decompress(blob)
    copy = materialize(tmp_path / "home", "rev-dirlinks", blob)
    assert os.readlink(copy / "files") == "shared" and (copy / "files" / "motd.txt").read_text() == "shared\n"
    assert os.readlink(copy / "templates" / "up") == ".."
    assert os.readlink(copy / "secrets") == str(outside)


def test_a_copy_an_earlier_release_left_on_disk_is_never_reused(tmp_path: Path):
    """A copy written under ``<home>/revisions`` by a release that followed links out (a token stored as a plain
    file) is not the copy of this format: the revision is written anew beside it, never served from it."""
    home = tmp_path / "home"
    import hashlib

    older = home / "revisions" / hashlib.sha256(b"rev1").hexdigest()[:32]  # the earlier release's name for it
    older.mkdir(parents=True)
    (older / "token").write_text("SERVER-SECRET\n")
    fleet = _fleet(tmp_path / "fleet")
    copy = materialize(home, "rev1", capture(fleet))
    assert copy != older.resolve() and not (copy / "token").exists() and (copy / "nodes.yaml").is_file()


def test_a_blob_that_inflates_past_its_bound_is_refused_before_it_is_inflated(monkeypatch: pytest.MonkeyPatch):
    """A stored blob no ``capture`` made (a hand edit of the store, a compression bomb) is refused at the bound,
    never inflated whole in the server: 64 MiB of zeros compress to 64 KiB."""
    from datum.fleet.rollouts import snapshot

    bomb = zlib.compress(b"0" * (64 * 1024 * 1024), 9)
    assert len(bomb) < 128 * 1024
    monkeypatch.setattr(snapshot, "MAX_BLOB_TEXT", 1024 * 1024)
    with pytest.raises(ValueError, match="inflates past 1048576 bytes"):
        files_of(bomb)


def test_a_blob_cut_short_is_refused():
    blob = zlib.compress(json.dumps([["nodes.yaml", base64.b64encode(b"nodes: []\n").decode()]]).encode())
    with pytest.raises(ValueError, match="cut short"):
        files_of(blob[:-6])

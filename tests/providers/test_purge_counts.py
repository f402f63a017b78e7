"""Directory purge and ``ensure: absent`` count what they remove, at observe and again at apply.

Issue 7 §1 on the host: nothing that can hold data is removed recursively when
content appeared in it since the pass decided; without ``force`` a directory
with content is a refusal naming it and what it holds, and the rest of the
purge still happens. Links are unlinked, never followed.
"""

from __future__ import annotations

import os

import pytest

from datum import safefs
from datum.core.vocab import Action
from datum.providers.base import ProviderError
from datum.providers.directory import PROVIDER as DIRECTORY
from datum.providers.directory.spec import DirectorySpec

CONTENT = "set force: true to purge directories with content"


def decide(spec, ctx):
    """desired -> observe -> plan: what the pass decided, before apply."""
    want = DIRECTORY.desired("x", spec, ctx)
    have = DIRECTORY.observe(want, ctx)
    return want, have, DIRECTORY.plan(want, have)


@pytest.fixture
def www(ctx):
    www = ctx.root / "srv" / "www"
    www.mkdir(parents=True)
    (www / "index.html").write_text("managed")
    (www / "junk.txt").write_text("x")
    ctx.managed_paths = frozenset({"/srv/www", "/srv/www/index.html"})
    return www


def test_a_directory_with_content_is_kept_and_named_without_force(ctx, www):
    (www / "uploads" / "2024").mkdir(parents=True)
    (www / "uploads" / "2024" / "photo.jpg").write_text("a tenant's")
    (www / "uploads" / "notes").write_text("n")
    want, have, change = decide(DirectorySpec(path="/srv/www", purge=True), ctx)
    # plan promises what apply does: junk.txt goes, uploads is refused and said so
    assert change.action is Action.UPDATE
    assert change.differences == (
        "unmanaged entries: junk.txt",
        f"could not purge uploads: holds 3 entries; {CONTENT}",
    )
    with pytest.raises(ProviderError, match=f"uploads: holds 3 entries; {CONTENT}"):
        DIRECTORY.apply(want, have, change, ctx)
    assert (www / "uploads" / "2024" / "photo.jpg").read_text() == "a tenant's"
    assert not (www / "junk.txt").exists()  # the rest of the purge happened
    assert (www / "index.html").exists()
    # Once only the refusal is left, plan fails with it, as apply would.
    ctx.changed()
    with pytest.raises(ProviderError, match=f"could not purge uploads: holds 3 entries; {CONTENT}"):
        decide(DirectorySpec(path="/srv/www", purge=True), ctx)


def test_a_directory_of_empty_directories_is_purged_without_force(ctx, www):
    (www / "cache" / "a" / "b").mkdir(parents=True)
    (www / "cache" / "c").mkdir()
    want, have, change = decide(DirectorySpec(path="/srv/www", purge=True), ctx)
    assert change.differences == ("unmanaged entries: cache, junk.txt",)
    DIRECTORY.apply(want, have, change, ctx)
    assert sorted(os.listdir(www)) == ["index.html"]


def test_content_appearing_after_observe_is_kept_without_force(ctx, www):
    (www / "cache" / "a").mkdir(parents=True)
    want, have, change = decide(DirectorySpec(path="/srv/www", purge=True), ctx)
    assert "cache" in change.differences[0]
    (www / "cache" / "a" / "new").write_text("written meanwhile")
    with pytest.raises(ProviderError, match=f"cache: holds 2 entries; {CONTENT}"):
        DIRECTORY.apply(want, have, change, ctx)
    assert (www / "cache" / "a" / "new").read_text() == "written meanwhile"
    assert not (www / "junk.txt").exists()


def test_content_appearing_after_observe_is_kept_with_force(ctx, www):
    (www / "old" / "sub").mkdir(parents=True)
    (www / "old" / "sub" / "f").write_text("x")
    (www / "gone").mkdir()
    (www / "gone" / "g").write_text("x")
    want, have, change = decide(DirectorySpec(path="/srv/www", purge=True, force=True), ctx)
    assert change.differences == ("unmanaged entries: gone, junk.txt, old",)
    (www / "old" / "sub" / "uploaded").write_text("a tenant's, just now")
    with pytest.raises(
        ProviderError,
        match="could not purge old: 1 entry appeared since the pass decided; left alone",
    ):
        DIRECTORY.apply(want, have, change, ctx)
    assert (www / "old" / "sub" / "uploaded").read_text() == "a tenant's, just now"
    assert (www / "old" / "sub" / "f").exists()
    assert sorted(os.listdir(www)) == ["index.html", "old"]  # gone/ and junk.txt went


def test_force_removes_trees_with_content(ctx, www):
    (www / "old" / "a" / "b").mkdir(parents=True)
    (www / "old" / "a" / "b" / "deep").write_text("x")
    (www / "old" / "top").write_text("x")
    os.mkfifo(www / "old" / "fifo")
    want, have, change = decide(DirectorySpec(path="/srv/www", purge=True, force=True), ctx)
    DIRECTORY.apply(want, have, change, ctx)
    assert sorted(os.listdir(www)) == ["index.html"]
    ctx.changed()
    assert (
        decide(DirectorySpec(path="/srv/www", purge=True, force=True), ctx)[2].action is Action.NONE
    )


def test_fewer_entries_than_observed_is_still_removed_with_force(ctx, www):
    (www / "old").mkdir()
    (www / "old" / "a").write_text("x")
    (www / "old" / "b").write_text("x")
    want, have, change = decide(DirectorySpec(path="/srv/www", purge=True, force=True), ctx)
    (www / "old" / "b").unlink()
    DIRECTORY.apply(want, have, change, ctx)
    assert not (www / "old").exists()


def test_purged_links_are_unlinked_and_their_targets_kept(ctx, www, tmp_path):
    data = ctx.root / "data"
    (data / "dir").mkdir(parents=True)
    (data / "dir" / "precious").write_text("keep me")
    (data / "file").write_text("keep me too")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("not under the root")
    (www / "to-dir").symlink_to("/data/dir")
    (www / "to-file").symlink_to(data / "file")
    (www / "to-outside").symlink_to(outside)
    (www / "dangling").symlink_to("/nowhere")
    (www / "tree").mkdir()
    (www / "tree" / "inner").symlink_to(data / "dir")
    for force in (False, True):
        want, have, change = decide(DirectorySpec(path="/srv/www", purge=True, force=force), ctx)
        try:
            DIRECTORY.apply(want, have, change, ctx)
        except ProviderError as exc:
            assert not force and f"tree: holds 1 entry; {CONTENT}" in str(exc)
        ctx.changed()
    assert sorted(os.listdir(www)) == ["index.html"]
    assert (data / "dir" / "precious").read_text() == "keep me"
    assert (data / "file").read_text() == "keep me too"
    assert (outside / "precious").read_text() == "not under the root"


def test_an_entry_swapped_for_a_link_after_observe_is_unlinked_not_followed(ctx, www):
    data = ctx.root / "data"
    data.mkdir()
    (data / "precious").write_text("keep me")
    (www / "old").mkdir()
    (www / "old" / "f").write_text("x")
    want, have, change = decide(DirectorySpec(path="/srv/www", purge=True, force=True), ctx)
    (www / "old" / "f").unlink()
    (www / "old").rmdir()
    (www / "old").symlink_to(data)
    DIRECTORY.apply(want, have, change, ctx)
    assert not os.path.lexists(www / "old")
    assert (data / "precious").read_text() == "keep me"


def test_absent_with_force_keeps_a_tree_that_grew_since_observe(ctx):
    d = ctx.root / "d"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "f").write_text("x")
    want, have, change = decide(DirectorySpec(path="/d", ensure="absent", force=True), ctx)
    assert change.action is Action.DELETE
    assert change.differences == ("directory holding 2 entries, want absent",)
    (d / "sub" / "new").write_text("written meanwhile")
    with pytest.raises(
        ProviderError, match="/d: 1 entry appeared since the pass decided; left alone"
    ):
        DIRECTORY.apply(want, have, change, ctx)
    assert (d / "sub" / "new").read_text() == "written meanwhile"
    ctx.changed()
    want, have, change = decide(DirectorySpec(path="/d", ensure="absent", force=True), ctx)
    DIRECTORY.apply(want, have, change, ctx)  # decided again, with what it holds now
    assert not d.exists()


def test_absent_without_force_keeps_content_that_appeared_after_observe(ctx):
    d = ctx.root / "d"
    d.mkdir()
    want, have, change = decide(DirectorySpec(path="/d", ensure="absent"), ctx)
    assert change.action is Action.DELETE
    (d / "new").write_text("written meanwhile")
    with pytest.raises(ProviderError, match="no longer empty"):
        DIRECTORY.apply(want, have, change, ctx)
    assert (d / "new").read_text() == "written meanwhile"


def test_absent_on_a_link_to_a_directory_removes_the_link_only(ctx):
    (ctx.root / "data").mkdir()
    (ctx.root / "data" / "precious").write_text("keep me")
    (ctx.root / "d").symlink_to("/data")
    for force in (False, True):
        want, have, change = decide(DirectorySpec(path="/d", ensure="absent", force=force), ctx)
        if change.action is Action.DELETE:
            DIRECTORY.apply(want, have, change, ctx)
        ctx.changed()
    assert not os.path.lexists(ctx.root / "d")
    assert (ctx.root / "data" / "precious").read_text() == "keep me"


def test_a_deep_tree_is_counted_and_removed_without_recursion_limits(ctx, www):
    deep = www / "old"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1200):  # deeper than Python's recursion limit
        os.mkdir("d", dir_fd=fd)
        sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = sub
    os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    os.close(fd)
    try:
        want, have, change = decide(DirectorySpec(path="/srv/www", purge=True, force=True), ctx)
        DIRECTORY.apply(want, have, change, ctx)
        assert not deep.exists()
    finally:  # pytest's own clean-up of old temporary roots cannot remove a tree this deep
        if deep.exists():
            safefs.remove_tree(www, "old", decided=safefs.tally(deep).entries)


def test_file_absent_never_removes_a_directory_that_replaced_the_file_since_observe(ctx):
    from datum.providers.file import PROVIDER as FILE
    from datum.providers.file.spec import FileSpec

    (ctx.root / "f").write_text("x")
    spec = FileSpec(path="/f", ensure="absent")
    want = FILE.desired("x", spec, ctx)
    have = FILE.observe(want, ctx)
    change = FILE.plan(want, have)
    (ctx.root / "f").unlink()
    (ctx.root / "f").mkdir()
    (ctx.root / "f" / "data").write_text("appeared")
    with pytest.raises(ProviderError, match="is a directory now"):
        FILE.apply(want, have, change, ctx)
    assert (ctx.root / "f" / "data").read_text() == "appeared"


def test_force_never_crosses_a_mount_point(ctx, www, tmpfs):
    tmpfs(www / "old" / "disk")
    (www / "old" / "disk" / "data").write_text("on another filesystem")
    (www / "old" / "mine").write_text("x")
    want, have, change = decide(DirectorySpec(path="/srv/www", purge=True, force=True), ctx)
    with pytest.raises(
        ProviderError, match=r"could not purge old: holds a mount point \(disk\); left alone"
    ):
        DIRECTORY.apply(want, have, change, ctx)
    assert (www / "old" / "disk" / "data").read_text() == "on another filesystem"
    assert (www / "old" / "mine").exists()  # nothing of the tree was removed
    assert not (www / "junk.txt").exists()


def test_absent_with_force_never_removes_a_mounted_filesystem(ctx, tmpfs):
    tmpfs(ctx.root / "mnt" / "data")
    (ctx.root / "mnt" / "data" / "db").write_text("on another filesystem")
    want, have, change = decide(DirectorySpec(path="/mnt/data", ensure="absent", force=True), ctx)
    with pytest.raises(ProviderError, match="/mnt/data: is a mount point; left alone"):
        DIRECTORY.apply(want, have, change, ctx)
    assert (ctx.root / "mnt" / "data" / "db").read_text() == "on another filesystem"

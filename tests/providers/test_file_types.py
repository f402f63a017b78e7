"""File, Directory, Symlink and Line: plans as tables, applies against a real root."""

from __future__ import annotations

import os
import stat

import pytest

from datum.core.vocab import Action
from datum.providers.directory import PROVIDER as DIRECTORY
from datum.providers.directory.spec import DirectorySpec
from datum.providers.file import PROVIDER as FILE
from datum.providers.file.spec import FileSpec
from datum.providers.line import PROVIDER as LINE
from datum.providers.line import edit
from datum.providers.line.spec import LineSpec
from datum.providers.symlink import PROVIDER as SYMLINK
from datum.providers.symlink.spec import SymlinkSpec


def converge(provider, spec, ctx):
    """observe -> plan -> apply -> observe again; the action taken and the plan after."""
    want = provider.desired("x", spec, ctx)
    change = provider.plan(want, provider.observe(want, ctx))
    if change.action is not Action.NONE:
        provider.apply(want, provider.observe(want, ctx), change, ctx)
        ctx.changed()
    after = provider.plan(want, provider.observe(want, ctx))
    return change, after


@pytest.mark.parametrize(
    ("before", "spec", "action", "differences"),
    [
        (None, {"content": "a\n"}, Action.CREATE, ("absent",)),
        (("a\n", 0o644), {"content": "a\n", "mode": "0644"}, Action.NONE, ()),
        (("b\n", 0o644), {"content": "a\n"}, Action.UPDATE, ("content",)),
        (("a\n", 0o600), {"content": "a\n", "mode": "0644"}, Action.UPDATE, ("mode 0600, want 0644",)),
        (("a\n", 0o600), {"mode": "0600"}, Action.NONE, ()),  # content not managed
        (("a\n", 0o644), {"ensure": "absent"}, Action.DELETE, ("file present, want absent",)),
        (None, {"ensure": "absent"}, Action.NONE, ()),
    ],
)
def test_file_plan(ctx, before, spec, action, differences):
    target = ctx.root / "etc" / "f"
    if before is not None:
        target.parent.mkdir(parents=True)
        target.write_text(before[0])
        target.chmod(before[1])
    s = FileSpec(path="/etc/f", **spec)
    change, after = converge(FILE, s, ctx)
    assert (change.action, change.differences) == (action, differences)
    assert after.action is Action.NONE


def test_file_template_uses_host_facts(ctx):
    (ctx.manifest_dir / "motd.j2").write_text("{{ hostname }} {{ cpu_count }} {{ greeting }}\n")
    (ctx.root / "etc").mkdir()
    (ctx.root / "etc" / "hostname").write_text("web-7\n")
    spec = FileSpec(path="/etc/motd", template="motd.j2", vars={"greeting": "hi"})
    converge(FILE, spec, ctx)
    assert (ctx.root / "etc/motd").read_text() == f"web-7 {os.cpu_count()} hi\n"


def test_file_source_next_to_the_manifest(ctx):
    (ctx.manifest_dir / "nginx.conf").write_bytes(b"\x00binary\xff")
    change, _ = converge(FILE, FileSpec(path="/etc/nginx.conf", source="nginx.conf"), ctx)
    assert change.action is Action.CREATE
    assert (ctx.root / "etc/nginx.conf").read_bytes() == b"\x00binary\xff"


def test_file_owner_by_name_from_the_roots_passwd(ctx):
    (ctx.root / "etc").mkdir()
    (ctx.root / "etc/passwd").write_text("web:x:4242:4243::/srv:/bin/sh\n")
    (ctx.root / "etc/group").write_text("web:x:4243:\n")
    converge(FILE, FileSpec(path="/srv/f", content="x", owner="web", group="web"), ctx)
    st = (ctx.root / "srv/f").stat()
    assert (st.st_uid, st.st_gid) == (4242, 4243)


def test_directory_purge_removes_only_unmanaged_entries(ctx):
    www = ctx.root / "srv" / "www"
    (www / "site").mkdir(parents=True)
    (www / "index.html").write_text("x")
    (www / "junk.txt").write_text("x")
    (www / "old").mkdir()
    (www / "old" / "deep").write_text("x")
    ctx.managed_paths = frozenset({"/srv/www", "/srv/www/index.html", "/srv/www/site/a/b.html"})
    spec = DirectorySpec(path="/srv/www", purge=True, force=True)  # old/ holds a file
    change, after = converge(DIRECTORY, spec, ctx)
    assert change.differences == ("unmanaged entries: junk.txt, old",)
    assert sorted(os.listdir(www)) == ["index.html", "site"]
    assert after.action is Action.NONE


def test_directory_absent_refuses_a_non_empty_directory_without_force(ctx):
    (ctx.root / "d").mkdir()
    (ctx.root / "d" / "f").write_text("x")
    want = DIRECTORY.desired("d", DirectorySpec(path="/d", ensure="absent"), ctx)
    have = DIRECTORY.observe(want, ctx)
    with pytest.raises(Exception, match="not empty"):
        DIRECTORY.apply(want, have, DIRECTORY.plan(want, have), ctx)
    change, _ = converge(DIRECTORY, DirectorySpec(path="/d", ensure="absent", force=True), ctx)
    assert change.action is Action.DELETE
    assert not (ctx.root / "d").exists()


def test_directory_mode(ctx):
    (ctx.root / "d").mkdir(mode=0o700)
    change, _ = converge(DIRECTORY, DirectorySpec(path="/d", mode="2775"), ctx)
    assert change.differences == ("mode 0700, want 2775",)
    assert stat.S_IMODE((ctx.root / "d").stat().st_mode) == 0o2775


@pytest.mark.parametrize(
    ("before", "target", "action"),
    [
        (None, "/srv/www", Action.CREATE),
        ("/srv/www", "/srv/www", Action.NONE),
        ("/srv/old", "/srv/www", Action.UPDATE),
        ("file", "/srv/www", Action.UPDATE),
    ],
)
def test_symlink(ctx, before, target, action):
    link = ctx.root / "srv" / "current"
    link.parent.mkdir(parents=True)
    if before == "file":
        link.write_text("x")
    elif before:
        link.symlink_to(before)
    # A file's content is replaced only with force (test_trust covers the refusal).
    spec = SymlinkSpec(path="/srv/current", target=target, force=before == "file")
    change, after = converge(SYMLINK, spec, ctx)
    assert change.action is action
    assert after.action is Action.NONE
    assert os.readlink(link) == target


@pytest.mark.parametrize(
    ("text", "spec", "expected"),
    [
        ("a\nb\n", {"line": "c"}, "a\nb\nc\n"),
        ("a\nc\n", {"line": "c"}, "a\nc\n"),
        ("PermitRootLogin yes\nX\n", {"line": "PermitRootLogin no", "match": "^PermitRootLogin"}, "PermitRootLogin no\nX\n"),
        ("#P 1\nP 2\n", {"line": "P 3", "match": "^#?P "}, "#P 1\nP 3\n"),  # the last match, as lineinfile
        ("a\nc\nc\n", {"line": "c", "ensure": "absent"}, "a\n"),
        ("k=1\nk=2\n", {"match": "^k=", "ensure": "absent"}, ""),
        ("", {"line": "only"}, "only\n"),
    ],
)
def test_line_edit(text, spec, expected):
    assert edit(text, LineSpec(path="/f", **spec)) == expected


def test_line_without_file_fails_unless_create(ctx):
    want = LINE.desired("x", LineSpec(path="/etc/f", line="a"), ctx)
    with pytest.raises(Exception, match="does not exist"):
        LINE.observe(want, ctx)
    change, after = converge(LINE, LineSpec(path="/etc/f", line="a", create=True), ctx)
    assert change.action is Action.CREATE and after.action is Action.NONE


def test_line_missing_final_newline_is_not_drift(ctx):
    (ctx.root / "f").write_text("a\nb")
    change, _ = converge(LINE, LineSpec(path="/f", line="b"), ctx)
    assert change.action is Action.NONE

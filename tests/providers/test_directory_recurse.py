"""``Directory`` with ``recurse: true``: owner, group and mode below, as ``chown -R`` without following links.

Real files under a temporary root, run as root (chown works). Directories
below get the mode with x where it gives r (Puppet's choice), regular files
its permission bits; links are lchown-ed, never followed nor chmod-ed; a FIFO,
socket or device is left alone; a mount point is never crossed. Plan and
observe name what differs below (a bounded list); apply changes only that.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from datum.core.vocab import Action
from datum.host.manifest import parse_manifest
from datum.providers.directory import PROVIDER as DIRECTORY
from datum.providers.directory import searchable
from datum.providers.directory.spec import DirectorySpec

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")


def decide(spec, ctx):
    """desired -> observe -> plan: what the pass decided, before apply."""
    want = DIRECTORY.desired("x", spec, ctx)
    have = DIRECTORY.observe(want, ctx)
    return want, have, DIRECTORY.plan(want, have)


def converge(spec, ctx):
    want, have, change = decide(spec, ctx)
    DIRECTORY.apply(want, have, change, ctx)
    ctx.changed()
    return change


def meta(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid


@pytest.fixture
def tree(ctx, tmp_path):
    """/srv/app: files, subdirectories, a link out of the tree, all owned by root, mode 0600/0700."""
    app = ctx.root / "srv" / "app"
    (app / "lib" / "deep").mkdir(parents=True)
    (app / "a.txt").write_text("a")
    (app / "lib" / "b.txt").write_text("b")
    (app / "lib" / "deep" / "c.txt").write_text("c")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    os.chmod(outside / "secret", 0o600)
    (app / "out").symlink_to(outside)  # a link to a directory outside the tree
    (app / "out-file").symlink_to(outside / "secret")
    for d in (app, app / "lib", app / "lib" / "deep"):
        os.chmod(d, 0o700)
    for f in (app / "a.txt", app / "lib" / "b.txt", app / "lib" / "deep" / "c.txt"):
        os.chmod(f, 0o600)
    return app


SPEC = {"path": "/srv/app", "recurse": True, "owner": "1000", "group": "1001", "mode": "0644"}


def test_owner_group_and_mode_apply_below_and_links_are_never_followed(ctx, tree, tmp_path):
    outside = tmp_path / "outside"
    change = converge(DirectorySpec(**SPEC), ctx)
    assert change.action is Action.UPDATE
    # Directories get x where the mode gives r (0644 -> 0755), the top one included; files 0644.
    for d in (tree, tree / "lib", tree / "lib" / "deep"):
        assert meta(d) == (0o755, 1000, 1001), d
    for f in (tree / "a.txt", tree / "lib" / "b.txt", tree / "lib" / "deep" / "c.txt"):
        assert meta(f) == (0o644, 1000, 1001), f
    # The links themselves are lchown-ed; what they point to is untouched.
    for link in (tree / "out", tree / "out-file"):
        assert (os.lstat(link).st_uid, os.lstat(link).st_gid) == (1000, 1001)
    assert meta(outside) == (stat.S_IMODE(os.stat(outside).st_mode), 0, 0)
    assert meta(outside / "secret") == (0o600, 0, 0)


def test_plan_names_what_differs_below_bounded_and_changes_nothing(ctx, tree):
    for n in range(10):
        (tree / "lib" / f"f{n:02d}").write_text("x")
        os.chmod(tree / "lib" / f"f{n:02d}", 0o600)
    before = {p: meta(p) for p in tree.rglob("*")}
    _want, _have, change = decide(DirectorySpec(path="/srv/app", recurse=True, mode="0644"), ctx)
    assert change.action is Action.UPDATE
    assert change.differences[0] == "mode 0700, want 0755"
    below = change.differences[1]
    # a.txt, lib, lib/b.txt, lib/deep, lib/deep/c.txt, lib/f00..f09: 15 entries; links have no mode
    assert below.startswith(
        "15 entries below differ: a.txt mode 0600, want 0644; lib mode 0700, want 0755; "
        "lib/b.txt mode 0600, want 0644; lib/deep mode 0700, want 0755; "
        "lib/deep/c.txt mode 0600, want 0644; and 10 more"
    ), below
    assert {p: meta(p) for p in tree.rglob("*")} == before
    assert meta(tree) == (0o700, 0, 0)


def test_a_second_pass_changes_nothing(ctx, tree):
    converge(DirectorySpec(**SPEC), ctx)
    _want, have, change = decide(DirectorySpec(**SPEC), ctx)
    assert change.action is Action.NONE
    assert have.below is not None and have.below.count == 0


def test_only_what_differs_changes_and_it_is_named_singly(ctx, tree):
    converge(DirectorySpec(**SPEC), ctx)
    os.chown(tree / "lib" / "b.txt", 0, -1)
    ctime = {p: os.lstat(p).st_ctime_ns for p in tree.rglob("*")}
    _want, _have, change = decide(DirectorySpec(**SPEC), ctx)
    assert change.differences == ("1 entry below differs: lib/b.txt owner 0, want 1000",)
    converge(DirectorySpec(**SPEC), ctx)
    assert meta(tree / "lib" / "b.txt") == (0o644, 1000, 1001)
    # Nothing else was touched (a chown or chmod, even to the same value, moves ctime).
    changed = [p for p in tree.rglob("*") if os.lstat(p).st_ctime_ns != ctime[p]]
    assert changed == [tree / "lib" / "b.txt"]


def test_a_setuid_file_keeps_its_bit_when_only_the_owner_changes(ctx, tree):
    tool = tree / "lib" / "tool"
    tool.write_text("#!/bin/sh\n")
    os.chmod(tool, 0o4755)
    setgid_dir = tree / "shared"
    setgid_dir.mkdir()
    os.chmod(setgid_dir, 0o2775)
    converge(DirectorySpec(path="/srv/app", recurse=True, owner="1000"), ctx)
    assert meta(tool) == (0o4755, 1000, 0)  # a chown clears setuid: put back
    assert meta(setgid_dir) == (0o2775, 1000, 0)
    assert meta(tree / "a.txt") == (0o600, 1000, 0)  # mode not managed: kept


def test_the_special_bits_of_the_mode_are_for_directories(ctx, tree):
    converge(DirectorySpec(path="/srv/app", recurse=True, group="1001", mode="2770"), ctx)
    assert meta(tree / "lib") == (0o2770, 0, 1001)
    assert meta(tree / "lib" / "b.txt") == (0o770, 0, 1001)
    assert searchable(0o640) == 0o750 and searchable(0o604) == 0o705 and searchable(0o2600) == 0o2700


def test_a_fifo_and_a_socket_below_are_left_alone_without_a_hang(ctx, tree, deadline):
    fifo = tree / "lib" / "pipe"
    os.mkfifo(fifo, 0o600)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tree / "sock"))
    try:
        os.chmod(tree / "sock", 0o600)
        change = converge(DirectorySpec(**SPEC), ctx)
        assert "pipe" not in " ".join(change.differences)
        assert meta(fifo) == (0o600, 0, 0)
        assert meta(tree / "sock") == (0o600, 0, 0)
        assert meta(tree / "lib" / "b.txt") == (0o644, 1000, 1001)
        assert decide(DirectorySpec(**SPEC), ctx)[2].action is Action.NONE
    finally:
        sock.close()


def test_a_mount_point_below_is_never_crossed(ctx, tree, tmpfs):
    mnt = tmpfs(tree / "mnt")
    (mnt / "data").write_text("d")
    os.chmod(mnt / "data", 0o600)
    converge(DirectorySpec(**SPEC), ctx)
    assert meta(mnt / "data") == (0o600, 0, 0)
    assert meta(mnt)[1:] == (0, 0)  # the mount point is the other filesystem's root
    assert meta(tree / "a.txt") == (0o644, 1000, 1001)
    assert decide(DirectorySpec(**SPEC), ctx)[2].action is Action.NONE


def test_a_link_swapped_in_for_a_directory_is_not_followed(ctx, tree, tmp_path):
    want, have, change = decide(DirectorySpec(**SPEC), ctx)
    # After observe, lib becomes a link to a directory outside the tree.
    (tree / "lib").rename(tmp_path / "moved")
    (tree / "lib").symlink_to(tmp_path / "moved")
    DIRECTORY.apply(want, have, change, ctx)
    assert meta(tmp_path / "moved" / "b.txt") == (0o600, 0, 0)
    assert os.lstat(tree / "lib").st_uid == 1000  # the link itself


def test_entries_other_resources_manage_are_left_to_them(ctx, tree, tmp_path):
    text = """
resources:
  - Directory[/srv/app]: {recurse: true, mode: '0644', owner: '1000'}
  - File[/srv/app/a.txt]: {content: a, mode: '0600'}
  - Directory[/srv/app/lib/deep]: {recurse: true, mode: '0700'}
"""
    ctx.manifest = parse_manifest(text, tmp_path)
    spec = ctx.manifest.resources[0].spec
    converge(spec, ctx)
    assert meta(tree / "a.txt") == (0o600, 0, 0)  # File[/srv/app/a.txt]'s
    assert meta(tree / "lib" / "deep") == (0o700, 0, 0)  # the inner Directory's tree
    assert meta(tree / "lib" / "deep" / "c.txt") == (0o600, 0, 0)
    assert meta(tree / "lib" / "b.txt") == (0o644, 1000, 0)


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({"ensure": "absent", "mode": "0644"}, "recurse applies to a present directory, not with ensure: absent"),
        ({}, "recurse applies mode, owner or group below: give at least one"),
        ({"path": "/", "owner": "0"}, "recurse on / would change every file of the root"),
    ],
)
def test_recurse_where_it_makes_no_sense_is_a_finding(tmp_path, attrs, message):
    from datum.core.findings import Problem

    body = {"path": "/srv/app", **attrs}
    fields = ", ".join(f"{k}: '{v}'" for k, v in body.items() if k != "path")
    text = f"resources:\n  - Directory[{body['path']}]: {{recurse: true{', ' + fields if fields else ''}}}\n"
    with pytest.raises(Problem) as caught:
        parse_manifest(text, tmp_path)
    (finding,) = caught.value.findings
    assert [f.message for f in finding.fields] == [message]


def line(out: str, resource_id: str) -> str:
    for text in out.splitlines():
        if text.startswith(resource_id + " "):
            return text[len(resource_id) :].strip()
    raise AssertionError(f"no pass line for {resource_id} in:\n{out}")


def test_datum_apply_recurses_once_and_plan_reports_drift_below(tmp_path, datum_cli, monkeypatch):
    monkeypatch.setenv("DATUM_BOOT_ID_FILE", str(tmp_path / "boot_id"))
    (tmp_path / "boot_id").write_text("boot-1\n")
    root = tmp_path / "root"
    www = root / "srv" / "www"
    (www / "img").mkdir(parents=True)
    (www / "index.html").write_text("hi")
    (www / "img" / "logo.png").write_text("png")
    os.chmod(www / "img", 0o700)
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(
        "resources:\n"
        "  - Directory[/srv/www]: {recurse: true, owner: '33', group: '33', mode: '0644'}\n"
        "  - File[/srv/www/.env]: {content: 'KEY=1', mode: '0600'}\n"
    )
    args = (str(manifest), "--root", str(root))
    state = ("--state", str(tmp_path / "state.db"))
    code, out, err = datum_cli("apply", *args, *state)
    assert code == 2, out + err
    assert line(out, "Directory[/srv/www]") == "updated"
    assert meta(www / "img") == (0o755, 33, 33)
    assert meta(www / "img" / "logo.png") == (0o644, 33, 33)
    assert meta(www / ".env") == (0o600, 0, 0)  # File[/srv/www/.env]'s own mode and owner
    code, out, err = datum_cli("apply", *args, *state)
    assert code == 0, out + err  # the File and the recursing Directory do not undo each other
    os.chmod(www / "img" / "logo.png", 0o600)
    code, out, err = datum_cli("plan", *args)
    assert code == 8, out + err
    assert "1 entry below differs: img/logo.png mode 0600, want 0644" in line(out, "Directory[/srv/www]")
    assert meta(www / "img" / "logo.png") == (0o600, 33, 33)


@pytest.mark.parametrize("directory_first", [True, False])
def test_a_new_file_below_a_recursing_directory_converges_in_one_pass(tmp_path, directory_first):
    """A File with no mode made below ``recurse: true, mode: 0600``: the first pass said
    converged and left it 0644, the second changed it. Now it is made 0600 (and with the
    directory's owner), whichever resource is listed first; the second pass changes nothing."""
    from datum.core.vocab import ResourceState
    from datum.host.executor import run_pass
    from datum.providers.base import HostContext

    directory = "  - Directory[/srv/secret]: {recurse: true, mode: '0600', owner: '1000'}\n"
    file = "  - File[/srv/secret/key]: {content: k}\n"
    text = "resources:\n" + (directory + file if directory_first else file + directory)
    root = tmp_path / "root"
    root.mkdir()
    (root / "srv/secret").mkdir(parents=True)
    manifest = parse_manifest(text, tmp_path)
    assert {o.state for o in run_pass(manifest, HostContext(root))} == {ResourceState.CONVERGED}
    assert meta(root / "srv/secret/key") == (0o600, 1000, 0)
    again = run_pass(manifest, HostContext(root))
    assert [(o.id, o.changed) for o in again if o.changed] == []

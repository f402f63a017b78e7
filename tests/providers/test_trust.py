"""Providers never destroy what they were not asked to, against real files under a temporary root.

Symlinks in every position, the root itself, setuid bits, Line's bytes, FIFOs,
sockets and devices, long names, leftover temporary files, absolute link
targets that do not exist yet, and content diffs that must not be shown.
These run as root (chown, setuid and mknod work).
"""

from __future__ import annotations

import os
import socket
import stat

import pytest

from datum import safefs
from datum.core.vocab import Action
from datum.providers import fs, reads
from datum.providers.base import ProviderError
from datum.providers.directory import PROVIDER as DIRECTORY
from datum.providers.directory.spec import DirectorySpec
from datum.providers.file import PROVIDER as FILE
from datum.providers.file.spec import FileSpec
from datum.providers.line import PROVIDER as LINE
from datum.providers.line.spec import LineSpec
from datum.providers.symlink import PROVIDER as SYMLINK
from datum.providers.symlink.spec import SymlinkSpec

NOT_READABLE = "(diff redacted: file is not world-readable)\n"
SENSITIVE = "(diff redacted: sensitive: true)\n"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown, setuid, mknod)")


def converge(provider, spec, ctx):
    """desired -> observe -> plan -> apply -> plan again, as a pass does: (change, plan after)."""
    want = provider.desired("x", spec, ctx)
    have = provider.observe(want, ctx)
    change = provider.plan(want, have)
    if change.action is not Action.NONE:
        provider.apply(want, have, change, ctx)
        ctx.changed()
    return change, provider.plan(want, provider.observe(want, ctx))


def tree(path):
    """Every path under ``path`` with what it is, for before/after comparisons."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, path)] = os.readlink(p) if os.path.islink(p) else fs.kind(os.lstat(p))
    return out


# --- ensure: absent on a symlink removes the link, never its target -----------------------------


@pytest.fixture
def links(ctx):
    """A root with a file, a directory with content, and links to each, a dangling one, a linked parent."""
    r = ctx.root
    (r / "data" / "keep").mkdir(parents=True)
    (r / "data" / "keep" / "precious").write_text("do not delete\n")
    (r / "data" / "file").write_text("target\n")
    (r / "etc").mkdir()
    (r / "etc" / "to-file").symlink_to("../data/file")
    (r / "etc" / "to-file-abs").symlink_to("/data/file")
    (r / "etc" / "to-dir").symlink_to("/data/keep")
    (r / "etc" / "dangling").symlink_to("/nowhere/at/all")
    (r / "parent").symlink_to("data")  # a link as a parent component
    return r


@pytest.mark.parametrize("name", ["to-file", "to-file-abs", "to-dir", "dangling"])
def test_file_absent_on_a_link_removes_the_link_only(ctx, links, name):
    change, after = converge(FILE, FileSpec(path=f"/etc/{name}", ensure="absent"), ctx)
    assert change.action is Action.DELETE
    assert change.differences == ("link present, want absent",)
    assert after.action is Action.NONE
    assert not os.path.lexists(links / "etc" / name)
    assert (links / "data/file").read_text() == "target\n"
    assert (links / "data/keep/precious").read_text() == "do not delete\n"


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("name", ["to-dir", "to-file", "dangling"])
def test_directory_absent_on_a_link_removes_the_link_only(ctx, links, name, force):
    change, after = converge(DIRECTORY, DirectorySpec(path=f"/etc/{name}", ensure="absent", force=force), ctx)
    assert change.action is Action.DELETE
    assert after.action is Action.NONE
    assert not os.path.lexists(links / "etc" / name)
    assert (links / "data/keep/precious").read_text() == "do not delete\n"
    assert (links / "data/file").read_text() == "target\n"


def test_a_link_as_parent_is_followed_and_kept(ctx, links):
    # /parent/file means data/file (a chroot reads it so); the link on the way stays.
    change, _ = converge(FILE, FileSpec(path="/parent/file", ensure="absent"), ctx)
    assert change.action is Action.DELETE
    assert not (links / "data/file").exists()
    assert os.readlink(links / "parent") == "data"
    converge(DIRECTORY, DirectorySpec(path="/parent/keep", ensure="absent", force=True), ctx)
    assert not (links / "data/keep").exists()
    assert os.readlink(links / "parent") == "data"


def test_file_present_on_a_link_writes_through_it(ctx, links):
    change, _ = converge(FILE, FileSpec(path="/etc/to-file", content="new\n"), ctx)
    assert change.action is Action.UPDATE
    assert os.readlink(links / "etc/to-file") == "../data/file"
    assert (links / "data/file").read_text() == "new\n"


def test_symlink_absent_removes_the_link_not_the_directory_it_names(ctx, links):
    change, _ = converge(SYMLINK, SymlinkSpec(path="/etc/to-dir", ensure="absent"), ctx)
    assert change.action is Action.DELETE
    assert (links / "data/keep/precious").exists()


def test_remove_never_follows_a_link_inside_a_tree(ctx, links):
    (links / "junk").mkdir()
    (links / "junk" / "inner").symlink_to("/data/keep")
    (links / "junk" / "inner-abs").symlink_to(links / "data" / "keep")
    fd = os.open(links, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(ProviderError, match="is a directory now"):
            fs.remove_at(fd, "junk", "/junk")  # fs.remove_at never removes a directory
    finally:
        os.close(fd)
    safefs.remove_tree(links, "junk", decided=2)
    assert not (links / "junk").exists()
    assert (links / "data/keep/precious").read_text() == "do not delete\n"


# --- the root itself ------------------------------------------------------------------------------


def test_directory_root_absent_is_a_validation_finding():
    with pytest.raises(ValueError, match="is the root"):
        DirectorySpec(path="/", ensure="absent", force=True)
    with pytest.raises(ValueError, match="is the root"):
        FileSpec(path="/", ensure="absent")
    with pytest.raises(ValueError, match="is the root"):
        SymlinkSpec(path="/", target="/elsewhere")
    assert DirectorySpec(path="/", mode="0755").path == "/"  # its mode and owner may be managed


@pytest.mark.parametrize(
    ("provider", "spec"),
    [
        (DIRECTORY, DirectorySpec.model_construct(
            path="/", ensure="absent", force=True, purge=False, mode=None, owner=None, group=None,
            requires=[], subscribes=[])),
        (FILE, FileSpec.model_construct(
            path="/", ensure="absent", content=None, source=None, template=None, vars={}, mode=None,
            owner=None, group=None, sensitive=False, requires=[], subscribes=[])),
        (SYMLINK, SymlinkSpec.model_construct(
            path="/", ensure="present", target="/x", requires=[], subscribes=[])),
    ],
)
def test_providers_refuse_the_root_even_unvalidated(ctx, provider, spec):
    (ctx.root / "etc").mkdir()
    (ctx.root / "etc" / "keep").write_text("x")
    with pytest.raises(ProviderError, match="is the root"):
        converge(provider, spec, ctx)
    assert (ctx.root / "etc" / "keep").read_text() == "x"


def test_a_symlinked_root_is_never_removed_or_replaced(tmp_path):
    from datum.providers.base import HostContext

    real = tmp_path / "real"
    real.mkdir()
    (real / "f").write_text("x")
    link = tmp_path / "root"
    link.symlink_to(real)
    ctx = HostContext(root=link, manifest_dir=tmp_path)
    spec = DirectorySpec.model_construct(
        path="/", ensure="absent", force=True, purge=False, mode=None, owner=None, group=None,
        requires=[], subscribes=[])
    with pytest.raises(ProviderError, match="is the root"):
        converge(DIRECTORY, spec, ctx)
    assert os.readlink(link) == str(real) and (real / "f").exists()


# --- setuid and setgid bits survive a rewrite ----------------------------------------------------


@needs_root
def test_rewrite_with_a_new_owner_keeps_setuid(ctx):
    f = ctx.root / "usr" / "bin" / "tool"
    f.parent.mkdir(parents=True)
    f.write_text("old\n")
    f.chmod(0o4755)
    change, after = converge(FILE, FileSpec(path="/usr/bin/tool", content="new\n", owner=1234, mode="4755"), ctx)
    assert change.differences == ("content", "owner 0, want 1234")
    st = f.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, f.read_text()) == (0o4755, 1234, "new\n")
    assert after.action is Action.NONE


@needs_root
def test_new_owner_without_a_managed_mode_keeps_setuid_and_setgid(ctx):
    f = ctx.root / "tool"
    f.write_text("same\n")
    f.chmod(0o6755)
    converge(FILE, FileSpec(path="/tool", owner=1234, group=4321), ctx)  # content and mode not managed
    st = f.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o6755, 1234, 4321)
    converge(FILE, FileSpec(path="/tool", content="other\n", owner=0), ctx)  # content and owner
    st = f.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o6755, 0, 4321)


@needs_root
def test_line_keeps_setuid_owner_and_mode(ctx):
    f = ctx.root / "tool"
    f.write_text("a\n")
    os.chown(f, 1234, 4321)
    f.chmod(0o4750)
    converge(LINE, LineSpec(path="/tool", line="b"), ctx)
    st = f.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o4750, 1234, 4321)


# --- Line changes only the line it manages ---------------------------------------------------------


@needs_root
def test_line_keeps_crlf_latin1_odd_separators_mode_and_owner(ctx):
    f = ctx.root / "etc" / "app.ini"
    f.parent.mkdir()
    before = b"[main]\r\nname=caf\xe9\r\nform\x0cfeed=1\r\nsep=a\xe2\x80\xa8b\r\nport=80\r\n"
    f.write_bytes(before)
    os.chown(f, 1234, 4321)
    f.chmod(0o600)
    change, after = converge(LINE, LineSpec(path="/etc/app.ini", line="port=8080", match="^port="), ctx)
    assert change.action is Action.UPDATE
    assert f.read_bytes() == before.replace(b"port=80\r\n", b"port=8080\r\n")
    assert after.action is Action.NONE
    converge(LINE, LineSpec(path="/etc/app.ini", line="debug=0"), ctx)  # appended with the file's ending
    assert f.read_bytes().endswith(b"port=8080\r\ndebug=0\r\n")
    converge(LINE, LineSpec(path="/etc/app.ini", match="^name=", ensure="absent"), ctx)
    assert f.read_bytes() == b"[main]\r\nform\x0cfeed=1\r\nsep=a\xe2\x80\xa8b\r\nport=8080\r\ndebug=0\r\n"
    st = f.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o600, 1234, 4321)


def test_line_matches_a_crlf_line_as_its_text(ctx):
    f = ctx.root / "f"
    f.write_bytes(b"a\r\nb\r\n")
    change, _ = converge(LINE, LineSpec(path="/f", line="b"), ctx)
    assert change.action is Action.NONE  # "b\r" is the line "b"
    assert f.read_bytes() == b"a\r\nb\r\n"


def test_line_appends_after_a_missing_final_newline_and_keeps_the_rest(ctx):
    f = ctx.root / "f"
    f.write_bytes(b"x\xff\n\x1c\x1d\x1e\x85last")  # \x1c-\x1e and \x85 are line breaks to splitlines
    converge(LINE, LineSpec(path="/f", line="new"), ctx)
    assert f.read_bytes() == b"x\xff\n\x1c\x1d\x1e\x85last\nnew\n"


def test_line_diff_of_a_private_file_is_redacted(ctx):
    f = ctx.root / "f"
    f.write_text("secret=1\n")
    f.chmod(0o640)
    want = LINE.desired("x", LineSpec(path="/f", line="secret=2", match="^secret="), ctx)
    change = LINE.plan(want, LINE.observe(want, ctx))
    assert change.diff == NOT_READABLE
    assert "secret" not in change.diff


# --- FIFOs, sockets and devices: failed with a reason, never a hang --------------------------------


def _special(path, what):
    if what == "fifo":
        os.mkfifo(path)
    elif what == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    else:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is


@needs_root
@pytest.mark.parametrize("what", ["fifo", "socket", "character device"])
@pytest.mark.parametrize(
    "spec",
    [
        FileSpec(path="/etc/thing", content="x\n"),
        FileSpec(path="/etc/thing", mode="0644"),
        FileSpec(path="/etc/thing", ensure="absent"),
        LineSpec(path="/etc/thing", line="x"),
        LineSpec(path="/etc/thing", line="x", ensure="absent"),
        DirectorySpec(path="/etc/thing"),
        DirectorySpec(path="/etc/thing", ensure="absent", force=True),
        SymlinkSpec(path="/etc/thing", target="/x"),
    ],
    ids=lambda s: f"{type(s).__name__}-{s.ensure}-{getattr(s, 'content', None) is not None}",
)
def test_special_files_fail_with_a_reason_and_stay(ctx, deadline, what, spec):
    thing = ctx.root / "etc" / "thing"
    thing.parent.mkdir()
    _special(thing, what)
    provider = {FileSpec: FILE, LineSpec: LINE, DirectorySpec: DIRECTORY, SymlinkSpec: SYMLINK}[type(spec)]
    with pytest.raises(ProviderError, match=f"is a {what}"):
        converge(provider, spec, ctx)
    assert fs.kind(os.lstat(thing)) == what  # not replaced, not removed


def test_read_bytes_refuses_a_fifo_without_blocking(tmp_path, deadline):
    os.mkfifo(tmp_path / "p")
    with pytest.raises(ProviderError, match="fifo"):
        fs.read_bytes(tmp_path / "p")


# --- long names, temporary files ---------------------------------------------------------------------


def test_names_of_255_bytes_work(ctx):
    name = "n" * 250 + ".conf"
    assert len(name.encode()) == 255
    change, after = converge(FILE, FileSpec(path=f"/etc/{name}", content="x\n"), ctx)
    assert change.action is Action.CREATE and after.action is Action.NONE
    converge(FILE, FileSpec(path=f"/etc/{name}", content="y\n"), ctx)
    assert (ctx.root / "etc" / name).read_text() == "y\n"
    converge(SYMLINK, SymlinkSpec(path="/etc/" + "l" * 255, target="/x"), ctx)
    converge(SYMLINK, SymlinkSpec(path="/etc/" + "l" * 255, target="/y"), ctx)
    assert os.readlink(ctx.root / "etc" / ("l" * 255)) == "/y"
    assert sorted(os.listdir(ctx.root / "etc")) == sorted([name, "l" * 255])  # no temporary left


def test_temporary_files_of_a_killed_pass_are_removed_by_the_next(ctx):
    etc = ctx.root / "etc"
    etc.mkdir()
    (etc / ".datum-tmp-0123456789ab").write_text("half")
    (etc / ".motd.k3j2h1.datum-tmp").write_text("half")  # as versions before named them
    (etc / ".current.datum-tmp").symlink_to("/data")  # a link: unlinked, never followed
    os.utime(etc / ".current.datum-tmp", (1, 1), follow_symlinks=False)  # made long ago
    (etc / ".datum-tmp-0123456789ac" / "sub").mkdir(parents=True)  # a home being built, unlocked
    (etc / "user.datum-tmp.txt").write_text("mine")
    (etc / ".datum-tmp-notes").write_text("mine")  # not Datum's 12 hex characters
    converge(FILE, FileSpec(path="/etc/motd", content="hi\n"), ctx)
    assert sorted(os.listdir(etc)) == [".datum-tmp-notes", "motd", "user.datum-tmp.txt"]


def test_a_sweep_leaves_the_temporary_files_of_a_pass_still_writing(ctx):
    """Two passes on one root with different state files: one's sweep met the other's file
    in flight and removed it (``No such file or directory: .../.datum-tmp-...``). A writer
    holds its file's lock until the rename; only an unlocked one (its writer dead) goes, and a
    fresh link (one mid-rename) stays."""
    import fcntl
    import multiprocessing

    etc = ctx.root / "etc"
    etc.mkdir()
    inflight, dead = etc / ".datum-tmp-0123456789ab", etc / ".datum-tmp-ba9876543210"
    fd = os.open(inflight, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as write_atomic holds it, in this process: another sweeps

    def killed_writer():
        held = os.open(dead, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(held, fcntl.LOCK_EX)
        os._exit(9)  # dies holding it: the kernel lets the lock go

    child = multiprocessing.get_context("fork").Process(target=killed_writer)
    child.start()
    child.join()
    (etc / ".datum-tmp-00000000000a").symlink_to("/x")  # a link being renamed into place now

    def sweep_elsewhere():
        fs.forget_sweeps()
        fs.sweep_temporaries(etc)
        os._exit(0)

    other = multiprocessing.get_context("fork").Process(target=sweep_elsewhere)
    other.start()
    other.join()
    assert sorted(os.listdir(etc)) == [".datum-tmp-00000000000a", ".datum-tmp-0123456789ab"]
    os.write(fd, b"still mine")
    os.replace(inflight, etc / "motd")  # the writer finishes as it would have
    os.close(fd)
    assert (etc / "motd").read_text() == "still mine"


# --- absolute link targets are read inside the root, whether they exist yet or not --------------


def test_an_absolute_target_that_does_not_exist_yet_is_inside_the_root(ctx):
    # An image root's /etc/resolv.conf -> /run/systemd/resolve/stub-resolv.conf, with a target
    # directory that surely exists nowhere on this machine either.
    target = f"/run/datum-test-{os.urandom(4).hex()}/resolve/stub-resolv.conf"
    assert not os.path.lexists(target)
    (ctx.root / "etc").mkdir()
    (ctx.root / "etc" / "resolv.conf").symlink_to(target)
    change, after = converge(FILE, FileSpec(path="/etc/resolv.conf", content="nameserver 127.0.0.53\n"), ctx)
    assert change.action is Action.CREATE and after.action is Action.NONE
    assert os.readlink(ctx.root / "etc/resolv.conf") == target
    assert (ctx.root / target.lstrip("/")).read_text() == "nameserver 127.0.0.53\n"
    assert not os.path.lexists(target)


def test_an_absolute_target_that_exists_only_outside_the_root_is_refused(ctx, tmp_path):
    (tmp_path / "outside").mkdir()
    (ctx.root / "etc").mkdir()
    (ctx.root / "etc" / "x").symlink_to(tmp_path / "outside")
    with pytest.raises(reads.Escape, match="links out of the root"):
        FILE.desired("x", FileSpec(path="/etc/x/f", content="x"), ctx)
    (ctx.root / str(tmp_path / "outside").lstrip("/")).mkdir(parents=True)  # the root has it too
    assert FILE.desired("x", FileSpec(path="/etc/x/f", content="x"), ctx).real == (
        ctx.root / str(tmp_path / "outside" / "f").lstrip("/")
    )


def test_an_absolute_target_climbing_above_the_root_is_still_refused(ctx):
    (ctx.root / "etc").mkdir()
    (ctx.root / "etc" / "x").symlink_to("/../../../tmp/evil")
    with pytest.raises(reads.Escape):
        FILE.desired("x", FileSpec(path="/etc/x", content="x"), ctx)


# --- plan says what apply would do ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "spec", "why"),
    [
        (FILE, FileSpec(path="/d", content="x"), "is a directory; refusing to replace it with a file"),
        (FILE, FileSpec(path="/d", ensure="absent"), "is a directory; a File will not remove it"),
        (DIRECTORY, DirectorySpec(path="/d", ensure="absent"), "not empty; set force: true"),
        (DIRECTORY, DirectorySpec(path="/f"), "is a file; refusing to replace it with a directory"),
        (SYMLINK, SymlinkSpec(path="/d", target="/x"), "is a directory; refusing to replace it"),
    ],
)
def test_plan_refuses_what_apply_would_refuse(ctx, provider, spec, why):
    (ctx.root / "d").mkdir()
    (ctx.root / "d" / "content").write_text("x")
    (ctx.root / "f").write_text("x")
    want = provider.desired("x", spec, ctx)
    have = provider.observe(want, ctx)
    with pytest.raises(ProviderError, match=why):
        provider.plan(want, have)


# --- diffs: redacted where the file is not world-readable or sensitive, and bounded --------------


@pytest.mark.parametrize(
    ("before_mode", "spec", "marker"),
    [
        (0o600, {}, NOT_READABLE),  # the existing file is private
        (0o644, {"mode": "0640"}, NOT_READABLE),  # it is about to be
        (0o644, {"sensitive": True}, SENSITIVE),
        (None, {"mode": "0600"}, NOT_READABLE),  # created private
        (0o644, {}, None),
    ],
)
def test_content_diff_redaction(ctx, before_mode, spec, marker):
    f = ctx.root / "secret"
    if before_mode is not None:
        f.write_text("password=old\n")
        f.chmod(before_mode)
    want = FILE.desired("x", FileSpec(path="/secret", content="password=new\n", **spec), ctx)
    change = FILE.plan(want, FILE.observe(want, ctx))
    if marker is None:
        assert "+password=new" in change.diff
    else:
        assert change.diff == marker
        assert "password" not in change.diff


def test_diffs_are_bounded():
    before = "".join(f"line {i}\n" for i in range(5000)).encode()
    after = "".join(f"line {i}!\n" for i in range(5000)).encode()
    diff = fs.unified("/f", before, after)
    assert diff.count("\n") <= fs.DIFF_MAX_LINES + 1
    assert diff.rstrip().endswith("more lines)") and "(diff truncated:" in diff
    huge = fs.unified("/f", b"x" * (fs.DIFF_MAX_BYTES + 1), b"y")
    assert huge == f"content differs ({fs.DIFF_MAX_BYTES + 1} bytes, want 1); too large to diff\n"


def test_diff_splits_on_newlines_only():
    diff = fs.unified("/f", b"a\x0cb\nc\n", b"a\x0cb\nd\n")
    assert " a\x0cb\n" in diff and "-c\n" in diff and "+d\n" in diff


# --- no content lost to a Symlink or a concurrent writer ---------------------------------------------


@pytest.mark.parametrize("ensure", ["present", "absent"])
def test_a_symlink_never_replaces_a_file_without_force(ctx, ensure):
    f = ctx.root / "etc" / "motd"
    f.parent.mkdir()
    f.write_text("the only copy\n")
    spec = SymlinkSpec(path="/etc/motd", target="/run/motd", ensure=ensure)
    want = SYMLINK.desired("x", spec, ctx)
    with pytest.raises(ProviderError, match="is a file; set force: true"):
        SYMLINK.plan(want, SYMLINK.observe(want, ctx))
    assert f.read_text() == "the only copy\n"
    forced = SymlinkSpec(path="/etc/motd", target="/run/motd", ensure=ensure, force=True)
    change, after = converge(SYMLINK, forced, ctx)
    assert change.action is not Action.NONE and after.action is Action.NONE
    assert os.path.islink(f) == (ensure == "present")


def test_line_keeps_a_line_written_between_observe_and_apply(ctx):
    f = ctx.root / "hosts"
    f.write_text("127.0.0.1 localhost\n")
    spec = LineSpec(path="/hosts", line="10.0.0.1 db")
    want = LINE.desired("x", spec, ctx)
    have = LINE.observe(want, ctx)
    change = LINE.plan(want, have)
    with f.open("a") as other_writer:  # another tool adds its line in the meantime
        other_writer.write("10.0.0.2 cache\n")
    LINE.apply(want, have, change, ctx)
    assert f.read_text() == "127.0.0.1 localhost\n10.0.0.2 cache\n10.0.0.1 db\n"

"""Atomic writes, and files read, compared or removed as a provider sees them: the one place
either is done.

What goes wrong is a ``ProviderError`` whose message is what the pass line says. Every read
goes through the recorder (``datum.providers.reads``), which also resolves a host path inside
the root (``real_path``). Every change under the root is made on a descriptor: ``write_at``,
``remove_at`` and ``set_meta`` take the directory (or the object) that
``datum.providers.held`` opened without following a link; ``write_atomic`` is for Datum's own
files (its state, its caches).
"""

from __future__ import annotations

import errno
import fcntl as _fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from datum.providers import reads
from datum.providers.errors import ProviderError

# Temporary files are named with this prefix and a few random characters, so a
# name stays short whatever the target's (NAME_MAX is 255 bytes), and a file left
# by a killed pass is recognised and removed by the next pass that writes there.
TMP_PREFIX = ".datum-tmp-"
_OLD_TMP_SUFFIX = ".datum-tmp"  # what versions before named them: .{name}.XXXX.datum-tmp
# A temporary link (``Symlink``) cannot be locked; it lives only between its symlink() and its
# rename, so one older than this was left by a pass that died.
LINK_LEFT_SECONDS = 60.0


_OLD_HOME = f"{TMP_PREFIX}home-"  # a home being built, as versions before named it: .datum-tmp-home-PID


def _is_temporary(name: str) -> bool:
    """Named as Datum names its temporary files and directories (12 hex characters), or as
    earlier versions did."""
    if name.startswith(TMP_PREFIX):
        tail = name[len(TMP_PREFIX) :]
        return (len(tail) == 12 and all(c in "0123456789abcdef" for c in tail)) or (
            name.startswith(_OLD_HOME) and name[len(_OLD_HOME) :].isdigit()
        )
    return name.startswith(".") and name.endswith(_OLD_TMP_SUFFIX)


_swept: set[tuple[int, int]] = set()


def forget_sweeps() -> None:
    """A new pass: sweep again each directory it writes to."""
    _swept.clear()


def sweep_temporaries(directory: Path | str | int) -> None:
    """Remove temporary files whose writer is gone from ``directory`` (a path, or a directory
    descriptor), once per pass and directory.

    Only regular files and links named as Datum names them; a link is removed, never
    followed. A writer holds an ``flock`` on its temporary file from its creation until
    it is renamed into place (``write_at``): a file whose lock is held belongs to a
    pass still running (another state file's, on the same root) and is left alone; one
    whose lock can be taken was left by a pass that died (the kernel let its lock go).
    """
    if isinstance(directory, int):
        fd = os.dup(directory)
    else:
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return
    try:
        here = os.fstat(fd)
        key = (here.st_dev, here.st_ino)
        if key in _swept:
            return
        _swept.add(key)
        try:
            with os.scandir(fd) as entries:
                found = [e.name for e in entries if _is_temporary(e.name)]
        except OSError:
            return
        for name in found:
            try:
                _remove_abandoned(fd, name)
            except Exception:  # noqa: BLE001 - a sweep never fails a pass: the next one tries again
                pass
    finally:
        os.close(fd)


def _remove_abandoned(dir_fd: int, name: str) -> None:
    """Remove the temporary file or directory ``name`` when no writer holds its lock (the lock is
    held meanwhile, and what is removed is what was locked: a writer that renamed it since is not
    touched); a temporary link, or a home an earlier version was building (never locked), once
    older than ``LINK_LEFT_SECONDS``. A directory goes with all it holds, links unlinked, never
    followed (``datum.safefs.remove_tree``), and only one a trusted uid owns: a user who names a directory
    of their own like Datum's temporaries in a directory they may write never has root remove it."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        from datum.providers.links import trusted

        if st.st_uid not in trusted():  # not one Datum made (it makes them root's): never a tree it removes
            return
    if stat.S_ISLNK(st.st_mode) or name.startswith(_OLD_HOME):
        import time

        if time.time() - st.st_mtime <= LINK_LEFT_SECONDS:
            return
        if stat.S_ISLNK(st.st_mode):
            os.unlink(name, dir_fd=dir_fd)
            return
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(name, flags | (os.O_DIRECTORY if stat.S_ISDIR(st.st_mode) else 0), dir_fd=dir_fd)
    try:
        try:
            _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
        except BlockingIOError:
            return  # its writer is still writing
        held = os.fstat(fd)
        now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
            return
        if stat.S_ISREG(now.st_mode):
            os.unlink(name, dir_fd=dir_fd)
        elif stat.S_ISDIR(now.st_mode):
            from datum import safefs

            safefs.remove_tree(dir_fd, name, decided=1 << 62)
    finally:
        os.close(fd)


def temporary_name() -> str:
    """A short, unused-looking name for a file or link about to be renamed into place."""
    return f"{TMP_PREFIX}{os.urandom(6).hex()}"


# Directories a deferred write renamed into and did not fsync yet (``write_at(sync_dir=False)``).
_unsynced: set[str] = set()


def write_atomic(
    path: Path | str,
    data: bytes,
    *,
    mode: int | None = None,
    uid: int = -1,
    gid: int = -1,
    sync_dir: bool = True,
    durable: bool = True,
) -> None:
    """``write_at`` for a path of Datum's own (its state, its caches): the directory is opened as
    named, and made when missing. A file under a managed root is written with ``write_at``
    through ``datum.providers.held`` instead."""
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:  # the directory is not there yet: make it (and its parents)
        os.makedirs(directory, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_at(
            fd, os.path.basename(path), data, mode=mode, uid=uid, gid=gid,
            sync_dir=sync_dir, durable=durable, directory=directory,
        )
    finally:
        os.close(fd)


def write_at(
    dir_fd: int,
    name: str,
    data: bytes,
    *,
    mode: int | None = None,
    uid: int = -1,
    gid: int = -1,
    replace: bool = True,
    sync_dir: bool = True,
    durable: bool = True,
    directory: str = "",
    host_path: str = "",
) -> None:
    """Replace ``name`` in the directory open at ``dir_fd`` with ``data`` so a crash leaves the old
    file or the new one, never half; nothing is ever written through a link.

    The temporary file (``O_EXCL | O_NOFOLLOW``, 0600) gets its owner, then its mode (a chown
    clears setuid and setgid bits, so the mode comes last), and is fsynced before it takes the
    name; an existing file's mode and owner are kept when not given. Its name is short
    (``.datum-tmp-`` and 12 characters), so a target name of 255 bytes works.

    ``replace=False`` creates and never replaces: the name is given with ``link(2)``, which
    fails when anything took the name since the pass looked (``held.Appeared``). With
    ``replace``, whatever is at the name is replaced, a link itself and never its target.

    ``sync_dir=False`` leaves the fsync of the directory (``directory``, its path), which makes
    the rename itself durable, to ``sync_dirs()``: one per directory, not one per file. Until
    then a power loss may undo the rename (the old file, or none, and at most a temporary
    file beside it): the next pass finds the difference and writes it again, and removes the
    temporary file.

    ``durable=False`` (a cache, whose every entry is checked when read) fsyncs neither the file
    nor the directory: a process killed at any moment still leaves the old file or the new one;
    a power loss may leave either, or an empty file the cache's check refuses.
    """
    sweep_temporaries(dir_fd)
    try:
        old = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    if mode is None:
        mode = stat.S_IMODE(old.st_mode) if old and stat.S_ISREG(old.st_mode) else 0o644
    if old is not None and stat.S_ISREG(old.st_mode):
        uid = old.st_uid if uid == -1 else uid
        gid = old.st_gid if gid == -1 else gid
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        tmp = temporary_name()
        try:
            fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            continue
        # Locked until renamed: another pass's sweep leaves it alone (``sweep_temporaries``).
        # One swept in the instant before the lock was taken is unlinked: take another name.
        _fcntl.flock(fd, _fcntl.LOCK_EX)
        if os.fstat(fd).st_nlink:
            break
        os.close(fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if uid != -1 or gid != -1:
                os.fchown(fd, uid, gid)
            os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
            place(dir_fd, tmp, name, replace=replace, host_path=host_path or name)
        finally:
            os.close(fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        raise
    if not durable:
        return
    if sync_dir or not directory:
        os.fsync(dir_fd)
    else:
        _unsynced.add(directory)


def place(dir_fd: int, tmp: str, name: str, *, replace: bool, host_path: str) -> None:
    """Give the temporary ``tmp`` (a file or a link) the name ``name``, both in the directory open
    at ``dir_fd``. ``replace``: whatever has the name goes (a link itself, never its target).
    Otherwise ``link(2)`` gives the name only if nothing has it (``held.Appeared`` when something
    does), then ``tmp`` goes: a name taken after the pass looked is never overwritten."""
    if replace:
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return
    from datum.providers import held

    try:
        try:
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            # No hard links on this filesystem (vfat: /boot/efi): the kernel's own no-replace rename.
            held.rename_noreplace(dir_fd, tmp, name)
            return
    except FileExistsError:
        try:
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            what = f"a {kind(now)}"
        except OSError:
            what = "something"
        raise held.appeared(host_path, what) from None
    os.unlink(tmp, dir_fd=dir_fd)


def sync_dirs() -> None:
    """fsync every directory a deferred ``write_atomic`` renamed into: its renames are durable after."""
    while _unsynced:
        directory = _unsynced.pop()
        try:
            fsync_dir(directory)
        except FileNotFoundError:
            continue  # removed since (by a later resource): nothing of it to make durable
        except BaseException:
            _unsynced.add(directory)
            raise


def fsync_dir(path: Path | str) -> None:
    """Make a rename or an unlink in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_bytes(path: Path | str) -> bytes | None:
    """A regular file's content, or None when it does not exist.

    Never hangs and never follows a final link: the kind is checked before the
    open, the open is ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO does not block) and
    what was opened must be a regular file.
    """
    st = lstat(path)
    return None if st is None else read_file(path, st)


def read_file(path: Path | str, st: os.stat_result) -> bytes | None:
    """``read_bytes`` for a path whose ``lstat`` was just made (``st``): no second one."""
    what = kind(st)
    if what == "directory":
        raise ProviderError(f"{path} is a directory")
    if what != "file":
        raise ProviderError(f"{path} is a {what}, not a regular file; refusing to read it")
    try:
        return reads.content(os.fspath(path), st)  # O_NOFOLLOW | O_NONBLOCK: never a link, never hangs
    except reads.NotRegular as exc:
        raise ProviderError(f"{path} is not a regular file; refusing to read it") from exc
    except OSError as exc:
        raise ProviderError(f"cannot read {path}: {exc.strerror}") from exc


def lstat(path: Path | str) -> os.stat_result | None:
    """The ``lstat`` of ``path`` (a read recorded by ``datum.providers.reads``); None when absent."""
    try:
        return reads.lstat(os.fspath(path))
    except FileNotFoundError:
        return None
    except NotADirectoryError as exc:
        raise ProviderError(f"a parent of {path} is not a directory") from exc


def remove_at(dir_fd: int, name: str, host_path: str) -> None:
    """Remove ``name`` (a file, a symlink or a special file) from the directory open at ``dir_fd``,
    never following a link (its target stays).

    A directory is never removed here: one found at ``name`` now was something else when the
    pass decided, so it is left alone (``datum.safefs`` removes directories, counting what they hold).
    """
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise ProviderError(f"{host_path} is a directory now, not what the pass decided on; left alone")
    os.unlink(name, dir_fd=dir_fd)
    os.fsync(dir_fd)


IMAGE = "/usr"  # what an image-mode host (bootc, ostree) boots read-only


def in_read_only_image(root: str, host_paths: list[str]) -> bool:
    """Whether one of ``host_paths`` is under ``/usr`` and ``/usr`` of ``root`` is mounted
    read-only (an image-mode host): a difference there changes only with a new image, so it
    is reported (``skipped``, reason ``image_mode``) and never written nor failed. A path that
    resolves elsewhere (ostree's ``/usr/local -> /var/usrlocal``) is checked where it leads."""
    for host_path in host_paths:
        if not (host_path == IMAGE or host_path.startswith(IMAGE + "/")):
            continue
        try:
            where = reads.real_path(root, host_path)
        except ProviderError:
            continue
        while True:  # the nearest that exists: the resource may create the rest
            try:
                if os.statvfs(where).f_flag & os.ST_RDONLY:
                    return True
                break
            except FileNotFoundError:
                parent = os.path.dirname(where)
                if parent == where:
                    break
                where = parent
            except OSError:
                break
    return False


# The file type bits of ``st_mode`` -> the kind's name: one lookup per observed path.
_KINDS = {
    stat.S_IFLNK: "link",
    stat.S_IFDIR: "directory",
    stat.S_IFREG: "file",
    stat.S_IFIFO: "fifo",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
}
SPECIAL = frozenset({"fifo", "socket", "character device", "block device", "other"})


def kind(st: os.stat_result | None) -> str:
    """``absent``, ``file``, ``directory``, ``link``, ``fifo``, ``socket``, ``character device``, ``block device``."""
    if st is None:
        return "absent"
    return _KINDS.get(stat.S_IFMT(st.st_mode), "other")


def refuse_special(host_path: str, what: str, want: str) -> None:
    """A FIFO, socket or device where a resource wants something else: never opened, never replaced."""
    if what in SPECIAL:
        raise ProviderError(f"{host_path} is a {what}; refusing to touch it (want {want})")


def meta_differences(
    st: os.stat_result | None, mode: int | None, uid: int | None, gid: int | None
) -> list[str]:
    """What differs in mode and ownership, each as ``mode 0600, want 0644``."""
    if st is None:
        return []
    out = []
    if mode is not None and stat.S_IMODE(st.st_mode) != mode:
        out.append(f"mode {stat.S_IMODE(st.st_mode):04o}, want {mode:04o}")
    if uid is not None and st.st_uid != uid:
        out.append(f"owner {st.st_uid}, want {uid}")
    if gid is not None and st.st_gid != gid:
        out.append(f"group {st.st_gid}, want {gid}")
    return out


def set_meta(
    fd: int, st: os.stat_result, mode: int | None, uid: int | None, gid: int | None, host_path: str = ""
) -> None:
    """Set the mode and ownership that are managed and differ on the object open at ``fd`` (whose
    ``fstat`` is ``st``), leave the rest alone: owner and mode land on that object, never on what
    a link swapped in since leads to.

    Ownership first, then the mode: a chown clears setuid and setgid bits, so when the mode is
    not managed the bits it had are put back. A regular file with other names is refused where
    users may hard-link what they do not own (``held.refuse_hardlinked``).
    """
    from datum.providers import held

    before = stat.S_IMODE(st.st_mode)
    new_uid = -1 if uid is None or st.st_uid == uid else uid
    new_gid = -1 if gid is None or st.st_gid == gid else gid
    if (new_uid, new_gid) != (-1, -1) or (mode is not None and before != mode):
        held.refuse_hardlinked(host_path or "the file", st)
    if (new_uid, new_gid) != (-1, -1):
        os.fchown(fd, new_uid, new_gid)
        if mode is None and before & (stat.S_ISUID | stat.S_ISGID):
            mode = before  # a chown clears setuid and setgid: put them back
        if mode is not None:
            os.fchmod(fd, mode)
            return
    if mode is not None and before != mode:
        os.fchmod(fd, mode)


# --- diffs in plans, reports, the store and ``datum status`` ----------------------------------

DIFF_MAX_BYTES = 1 << 20  # content larger than this is not diffed, only measured
DIFF_MAX_LINES = 500
DIFF_MAX_CHARS = 64 * 1024
REDACTED_MODE = "(diff redacted: file is not world-readable)\n"
REDACTED_SENSITIVE = "(diff redacted: sensitive: true)\n"


def redaction(sensitive: bool, *modes: int | None) -> str | None:
    """The marker that replaces a content diff, or None when it may be shown.

    As Puppet's ``show_diff``/``Sensitive``: a resource marked sensitive, or a file
    whose existing or desired mode lets others not read it, has no diff anywhere.
    """
    if sensitive:
        return REDACTED_SENSITIVE
    if any(m is not None and not m & stat.S_IROTH for m in modes):
        return REDACTED_MODE
    return None


def split_lines(text: str) -> list[str]:
    """Lines split on ``\n`` only, each keeping its end (``str.splitlines`` also splits on \x0c, \u2028...)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def unified(host_path: str, before: bytes | None, after: bytes | None) -> str:
    """A unified diff of file content for plans and drift reports, bounded in size."""
    size_a, size_b = len(before or b""), len(after or b"")
    if max(size_a, size_b) > DIFF_MAX_BYTES:
        return f"content differs ({size_a} bytes, want {size_b}); too large to diff\n"
    try:
        a = (before or b"").decode("utf-8")
        b = (after or b"").decode("utf-8")
    except UnicodeDecodeError:
        return f"binary content differs ({size_a} bytes, want {size_b})\n"
    fromfile = f"a{host_path}" if before is not None else "/dev/null"
    tofile = f"b{host_path}" if after is not None else "/dev/null"
    lines: Iterator[str]
    if a:
        import difflib

        lines = difflib.unified_diff(split_lines(a), split_lines(b), fromfile=fromfile, tofile=tofile)
    else:
        lines = _all_added(fromfile, tofile, split_lines(b))
    out: list[str] = []
    chars = 0
    for n, line in enumerate(lines):
        shown = line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        if n >= DIFF_MAX_LINES or chars + len(shown) > DIFF_MAX_CHARS:
            rest = sum(1 for _ in lines) + 1
            out.append(f"(diff truncated: {rest} more lines)\n")
            break
        out.append(shown)
        chars += len(shown)
    return "".join(out)


def _all_added(fromfile: str, tofile: str, lines: list[str]) -> Iterator[str]:
    """What ``difflib.unified_diff`` yields when there was nothing before (a created file),
    without its matcher: one hunk adding every line."""
    if not lines:
        return
    yield f"--- {fromfile}\n"
    yield f"+++ {tofile}\n"
    yield f"@@ -0,0 +1{'' if len(lines) == 1 else f',{len(lines)}'} @@\n"
    for line in lines:
        yield "+" + line

"""A user's home made from the root's ``/etc/skel``, as ``useradd -m`` makes it, by descriptor.

The home is built beside where it goes, under a temporary name (``.datum-tmp-`` and 12
hex characters, ``flock``-ed while it is built), then renamed into place: a pass killed in
the middle leaves no half home at the user's path, and the next pass that writes in that
directory sweeps the copy (``fs.sweep_temporaries``: the lock is free once its builder is
gone). Every step is made through directory descriptors opened with ``O_NOFOLLOW``,
from the root down (``datum.providers.held``): a link swapped in for the copy, for
``/etc/skel`` or for a directory on the way is refused, never followed, so the owner and
mode given to the copy's entries land on the copy's entries alone. Links in ``/etc/skel``
are copied as links; FIFOs, sockets and devices are not copied. On any error the copy is
removed and the error raised.
"""

from __future__ import annotations

import fcntl
import os
import stat
from typing import TYPE_CHECKING

from datum.providers import fs, held

if TYPE_CHECKING:
    from datum.providers.base import HostContext

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def make_home(ctx: HostContext, home: str, uid: int, gid: int, mode: int) -> None:
    """``home`` (a host path) from the root's /etc/skel, owned by uid:gid, the directory itself
    of ``mode``; left alone when anything is at ``home`` already (a link included)."""
    real = ctx.real(home)
    with ctx.parent(real, home, make=True) as (parent, name):
        try:
            os.stat(name, dir_fd=parent, follow_symlinks=False)
            return  # there already: an existing home is never touched
        except FileNotFoundError:
            pass
        fs.sweep_temporaries(parent)
        tmp = fs.temporary_name()
        os.mkdir(tmp, 0o700, dir_fd=parent)
        try:
            copy, _ = held.open_object(parent, tmp, home, stat.S_IFDIR)
            try:
                fcntl.flock(copy, fcntl.LOCK_EX)  # ours while it is built: a sweep leaves it alone
                skel = _skel(ctx)
                if skel is not None:
                    try:
                        _copy(skel, copy, uid, gid)
                    finally:
                        os.close(skel)
                os.fchown(copy, uid, gid)
                os.fchmod(copy, mode)
                os.fsync(copy)
                # rename(2) puts a directory only over nothing or an empty directory: a file or
                # a link that took the name since the look above makes it fail, never replaced.
                os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
            finally:
                os.close(copy)
        except BaseException:
            _discard(parent, tmp)
            raise
        os.fsync(parent)


def _skel(ctx: HostContext) -> int | None:
    """A descriptor of the root's /etc/skel, reached without following a link; None when there is
    no such directory (the home is made empty, as useradd makes it)."""
    real = ctx.real("/etc/skel")
    if fs.kind(fs.lstat(real)) != "directory":
        return None
    return held.open_directory(str(ctx.root), real, "/etc/skel")


def _copy(src: int, dst: int, uid: int, gid: int) -> None:
    """Everything in the directory open at ``src`` into the one open at ``dst``, owned by uid:gid,
    with the source's modes; links as links, special files left out."""
    with os.scandir(src) as it:
        names = sorted(e.name for e in it)
    for name in names:
        st = os.stat(name, dir_fd=src, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(name, dir_fd=src), name, dir_fd=dst)
            os.chown(name, uid, gid, dir_fd=dst, follow_symlinks=False)
        elif stat.S_ISDIR(st.st_mode):
            os.mkdir(name, 0o700, dir_fd=dst)
            inner, _ = held.open_object(src, name, name, stat.S_IFDIR)
            try:
                out, _ = held.open_object(dst, name, name, stat.S_IFDIR)
                try:
                    _copy(inner, out, uid, gid)
                    os.fchown(out, uid, gid)
                    os.fchmod(out, stat.S_IMODE(st.st_mode))
                finally:
                    os.close(out)
            finally:
                os.close(inner)
        elif stat.S_ISREG(st.st_mode):
            _copy_file(src, dst, name, st, uid, gid)


def _copy_file(src: int, dst: int, name: str, st: os.stat_result, uid: int, gid: int) -> None:
    inner = os.open(name, held.OBJECT, dir_fd=src)
    try:
        if not stat.S_ISREG(os.fstat(inner).st_mode):
            return  # swapped since it was listed
        out = os.open(name, _CREATE, 0o600, dir_fd=dst)
        try:
            while chunk := os.read(inner, 1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
            os.fchown(out, uid, gid)
            os.fchmod(out, stat.S_IMODE(st.st_mode))
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(out)
    finally:
        os.close(inner)


def _discard(parent: int, tmp: str) -> None:
    """Remove the half-built copy ``tmp`` (nothing but what this pass made is in it)."""
    from datum import safefs

    try:
        safefs.remove_tree(parent, tmp, decided=1 << 62)
    except OSError:
        pass  # the next pass's sweep removes it

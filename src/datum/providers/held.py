"""Acting on the object checked: every change under the root is made through descriptors.

The kernel looks a path up again at every call. Between a pass's look (observe) and its
change (apply), an ordinary user who can write a directory on the way can swap it, or the
object itself, for a link, and a write, ``chown`` or ``chmod`` by path lands on the link's
target (/etc made 1777, /etc/shadow written). So a real path under the root, which
``datum.providers.reads.real_path`` resolved with every link on the way checked
(``datum.providers.links``) and which therefore holds no link, is opened again here
component by component from the root, each with ``O_NOFOLLOW``: a component that is a link
or a file now was swapped since the pass resolved it, and the resource fails with nothing
touched (``Changed``). The change is then made through the directory's descriptor and the
final name (``*at`` calls that never follow a link), or through the object's own descriptor
(``fchown``, ``fchmod``).

The root itself is the operator's (``--root``) and is opened as given.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from datum.core import hostreasons
from datum.providers.errors import ProviderError

DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# An object opened to change its owner or mode: never a link, never blocking (a FIFO), never a tty.
OBJECT = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_MOVED = (errno.ELOOP, errno.ENOTDIR)


class Changed(ProviderError):
    """What the pass observed is not there any more (a link or something else swapped in)."""


class Appeared(ProviderError):
    """Something is at a path the pass observed empty: never overwritten."""


def changed(host_path: str, what: str) -> Changed:
    return Changed(f"{host_path}: {what} {hostreasons.CHANGED_SINCE}; nothing was changed")


def appeared(host_path: str, kind: str = "something") -> Appeared:
    return Appeared(
        f"{host_path}: {kind} {hostreasons.APPEARED_SINCE}; left alone (the next pass looks again)"
    )


def components(root: str, real: str) -> list[str]:
    """The names of ``real`` below ``root`` (both as ``real_path`` makes them)."""
    top = os.path.abspath(root)
    if real != top and not real.startswith(top.rstrip("/") + "/"):
        raise ProviderError(f"{real} is not under the root {top}")
    return [p for p in real[len(top) :].split("/") if p]


def _open_root(root: str) -> int:
    return os.open(os.path.abspath(root), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _step(fd: int, name: str, host_path: str, shown: str, make: bool) -> int:
    """The directory ``name`` in the directory open at ``fd``, opened without following a link;
    made (0755, less the umask, as ``mkdir -p``) when missing and ``make``."""
    for _ in range(2):
        try:
            return os.open(name, DIR, dir_fd=fd)
        except FileNotFoundError:
            if not make:
                raise
            try:
                os.mkdir(name, 0o755, dir_fd=fd)
            except FileExistsError:
                pass  # made meanwhile: opened (and checked) again
        except OSError as exc:
            if exc.errno in _MOVED:
                raise changed(host_path, shown) from None
            raise
    raise changed(host_path, shown)


def open_directory(root: str, real: str, host_path: str, *, make: bool = False) -> int:
    """A descriptor of the directory ``real`` under ``root``, each component opened with
    ``O_NOFOLLOW``; ``Changed`` when one of them is not a directory now (a link included)."""
    fd = _open_root(root)
    shown = ""
    try:
        for name in components(root, real):
            shown += "/" + name
            sub = _step(fd, name, host_path, shown, make)
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def parent(root: str, real: str, host_path: str, *, make: bool = False) -> Iterator[tuple[int, str]]:
    """``(descriptor of the directory holding real, its final name)`` for the ``with`` block;
    with ``make``, missing directories on the way are made."""
    names = components(root, real)
    if not names:
        raise ProviderError(f"{host_path} is the root; it is never replaced nor removed")
    top = os.path.abspath(root)
    fd = open_directory(root, os.path.join(top, *names[:-1]), host_path, make=make)
    try:
        yield fd, names[-1]
    finally:
        os.close(fd)


def open_object(dir_fd: int, name: str, host_path: str, kind: int) -> tuple[int, os.stat_result]:
    """The object ``name`` (of the file type ``kind``: ``stat.S_IFREG``, ``S_IFDIR``) in the directory
    open at ``dir_fd``, opened without following a link, and its ``fstat``; ``Changed`` when it is
    something else now."""
    flags = OBJECT | (os.O_DIRECTORY if kind == stat.S_IFDIR else 0)
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise changed(host_path, host_path) from None
    except OSError as exc:
        if exc.errno in _MOVED:
            raise changed(host_path, host_path) from None
        raise
    st = os.fstat(fd)
    if stat.S_IFMT(st.st_mode) != kind:
        os.close(fd)
        raise changed(host_path, host_path)
    return fd, st


def protected_hardlinks() -> bool:
    """Whether the kernel stops users from hard-linking files they do not own (``fs.protected_hardlinks``)."""
    try:
        with open("/proc/sys/fs/protected_hardlinks", "rb") as f:
            return f.read().strip() == b"1"
    except OSError:
        return False


def refuse_hardlinked(host_path: str, st: os.stat_result) -> None:
    """A regular file with more than one name, where users may hard-link what they do not own:
    its owner or mode is never changed (another of its names may be /etc/shadow), as
    systemd-tmpfiles refuses it."""
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and not protected_hardlinks():
        raise ProviderError(
            f"{host_path} has {st.st_nlink} {hostreasons.HARD_LINKS};"
            " refusing to change its owner or mode"
        )


def umask() -> int:
    """This process's umask, read without changing it (``/proc/self/status``; 022 when unknown)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


_RENAME_NOREPLACE = 1  # linux/fs.h


def rename_noreplace(dir_fd: int, old: str, new: str) -> None:
    """``renameat2(RENAME_NOREPLACE)``: ``old`` takes the name ``new`` (both in the directory open at
    ``dir_fd``) only if nothing has it, ``FileExistsError`` otherwise; for a filesystem without hard
    links, where ``place`` cannot use ``link(2)``. glibc's wrapper, through ctypes (Python has none)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(dir_fd, os.fsencode(old), dir_fd, os.fsencode(new), _RENAME_NOREPLACE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), new)

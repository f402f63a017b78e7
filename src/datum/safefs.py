"""Removing what can hold data: count it at that moment, never follow a link, never delete what appeared since.

The one place Datum removes a directory, used by the buckets reconciler and
by the host's ``Directory`` (``purge``, ``ensure: absent`` with ``force``).
Everything works from directory descriptors opened with ``O_NOFOLLOW``: a
link inside a tree, or swapped in for one, is counted and unlinked, never
walked into. Walks are iterative and hold one descriptor per level.

- ``remove_empty`` removes a directory that holds nothing but empty
  directories, with ``rmdir`` only, bottom-up: content that appears after its
  count makes an ``rmdir`` fail (``Occupied``). Nothing is unlinked.
- ``remove_tree`` removes a whole tree (``force``) only when it holds no more
  entries than when the caller decided (``Appeared`` otherwise), counted again
  through the descriptor it then removes through, and never across a mount
  point (``OtherFilesystem``).

``below`` walks a tree on its own filesystem for ``Directory`` ``recurse``:
each subdirectory comes with its open descriptor, so what changes it changes
the directory that was opened, never what a link swapped in for it leads to.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NOT_DIR = (errno.ELOOP, errno.ENOTDIR)


def entries_text(n: int) -> str:
    """``1 entry``, ``3 entries``."""
    return f"{n} entr{'y' if n == 1 else 'ies'}"


class Occupied(Exception):
    """A directory to be removed holds objects (or something appeared in it since the count)."""

    def __init__(self, objects: int) -> None:
        super().__init__(f"{objects} object{'' if objects == 1 else 's'}")
        self.objects = objects


class Appeared(Exception):
    """A tree to be removed holds more entries than when the pass decided to remove it: left alone."""

    def __init__(self, now: int, decided: int) -> None:
        super().__init__(
            f"{entries_text(now - decided)} appeared since the pass decided; left alone"
        )
        self.now = now
        self.decided = decided


@dataclass(frozen=True, slots=True)
class Tally:
    """What a directory holds, at every depth: all entries, and those that are not directories."""

    entries: int
    objects: int  # files, links, special files: anything that is not a directory


def open_dir(path: Path | str, *, dir_fd: int | None = None, follow: bool = False) -> int:
    """A descriptor of the directory ``path``; ``NotADirectoryError`` when it is not one (a link included)."""
    flags = DIR_FLAGS & ~os.O_NOFOLLOW if follow else DIR_FLAGS
    try:
        return os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _NOT_DIR:
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path)) from exc
        raise


@dataclass
class _Level:
    fd: int
    name: str  # its name in the level above
    todo: list[os.DirEntry[str]]


def _listing(fd: int) -> list[os.DirEntry[str]]:
    with os.scandir(fd) as it:
        return list(it)


class OtherFilesystem(Exception):
    """A tree to be removed is, or holds, a mount point: never crossed (as ``rm --one-file-system``)."""


def _walk(fd: int, device: int | None = None) -> Iterator[tuple[int, os.DirEntry[str] | str]]:
    """Every entry under the directory open at ``fd``, depth first, without following links.

    Yields ``(parent fd, entry)`` on the way down and ``(parent fd, name)`` once
    a subdirectory has been walked (post-order, for ``rmdir``). A subdirectory
    that is no longer one when opened is yielded as an entry only. With
    ``device``, a subdirectory on another filesystem raises ``OtherFilesystem``.
    """
    stack = [_Level(os.dup(fd), "", [])]
    try:
        stack[0].todo = _listing(stack[0].fd)
        while stack:
            top = stack[-1]
            if not top.todo:
                stack.pop()
                os.close(top.fd)
                if stack:
                    yield stack[-1].fd, top.name
                continue
            e = top.todo.pop()
            yield top.fd, e
            if e.is_dir(follow_symlinks=False):
                try:
                    sub = os.open(e.name, DIR_FLAGS, dir_fd=top.fd)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    if exc.errno in _NOT_DIR:
                        continue  # swapped for a link or a file since the listing
                    raise
                level = _Level(sub, e.name, [])
                stack.append(level)
                if device is not None and os.fstat(sub).st_dev != device:
                    raise OtherFilesystem(f"holds a mount point ({e.name}); left alone")
                level.todo = _listing(sub)
    finally:
        for level in stack:
            os.close(level.fd)


@dataclass(frozen=True, slots=True)
class Below:
    """An entry under a walked directory: its path from there, its ``lstat``, and for a directory its descriptor.

    ``fd`` is open only until the walk goes on; ``parent`` is the descriptor of
    the directory that holds ``name``.
    """

    parent: int
    name: str
    path: str
    st: os.stat_result
    fd: int | None


def below(fd: int) -> Iterator[Below]:
    """Every entry under the directory open at ``fd`` on its filesystem, depth first, sorted by name.

    Iterative, one descriptor per level, links never followed. A subdirectory is
    opened ``O_NOFOLLOW`` and yielded with its descriptor and that descriptor's
    ``fstat``; one on another filesystem (a mount point) is neither yielded nor
    entered. An entry gone since the listing, or a directory swapped for
    something else, is skipped (or yielded as what it is now).
    """
    device = os.fstat(fd).st_dev
    stack = [_Level(os.dup(fd), "", [])]
    try:
        stack[0].todo = _sorted_listing(stack[0].fd)
        while stack:
            top = stack[-1]
            if not top.todo:
                os.close(stack.pop().fd)
                continue
            e = top.todo.pop()
            path = f"{top.name}/{e.name}" if top.name else e.name
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                yield Below(top.fd, e.name, path, st, None)
                continue
            try:
                sub = os.open(e.name, DIR_FLAGS, dir_fd=top.fd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno not in _NOT_DIR:
                    raise
                try:  # swapped for a link or a file since the listing: what it is now
                    st = os.stat(e.name, dir_fd=top.fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                yield Below(top.fd, e.name, path, st, None)
                continue
            st = os.fstat(sub)
            if st.st_dev != device:  # a mount point: never crossed
                os.close(sub)
                continue
            stack.append(_Level(sub, path, []))
            yield Below(top.fd, e.name, path, st, sub)
            stack[-1].todo = _sorted_listing(sub)
    finally:
        for level in stack:
            os.close(level.fd)


def _sorted_listing(fd: int) -> list[os.DirEntry[str]]:
    """The entries of the directory open at ``fd``, last name first (popped in name order)."""
    return sorted(_listing(fd), key=lambda e: e.name, reverse=True)


def tally_fd(fd: int, limit: int | None = None, *, device: int | None = None) -> Tally:
    """What the directory open at ``fd`` holds; stops once ``limit`` entries are counted.

    With ``device``, a subdirectory on another filesystem raises ``OtherFilesystem``.
    """
    entries = objects = 0
    for _parent, e in _walk(fd, device):
        if isinstance(e, str):
            continue
        entries += 1
        if not e.is_dir(follow_symlinks=False):
            objects += 1
        if limit is not None and entries >= limit:
            break
    return Tally(entries, objects)


def tally(path: Path | str, limit: int | None = None, *, dir_fd: int | None = None) -> Tally:
    """What the directory ``path`` holds; ``NotADirectoryError`` when it is not one (a link included)."""
    fd = open_dir(path, dir_fd=dir_fd)
    try:
        return tally_fd(fd, limit)
    finally:
        os.close(fd)


def count_objects(path: Path | str) -> int:
    """How many objects (anything that is not a directory, symlinks included) ``path`` holds now.

    Never follows a symlink, ``path`` itself included (a symlink raises ``OSError``).
    """
    return tally(path).objects


def remove_empty(parent: Path | str | int, name: str) -> None:
    """Remove the directory ``parent/name`` if it holds nothing but empty directories.

    ``parent`` is a path (followed) or an open directory descriptor. Counts
    what ``name`` holds first and raises ``Occupied`` when that is not zero.
    Then removes its subdirectories bottom-up and itself last, with ``rmdir``
    only (which fails when content appeared since the count: ``Occupied``
    again), through directory descriptors opened without following symlinks.
    Nothing is ever unlinked. ``NotADirectoryError`` when ``name`` is not a
    directory (a symlink included); ``FileNotFoundError`` when it is gone.
    """
    with _parent(parent) as parent_fd:
        fd = open_dir(name, dir_fd=parent_fd)
        try:
            objects = tally_fd(fd).objects
            if objects:
                raise Occupied(objects)
            for at, e in _walk(fd):
                if isinstance(e, str):
                    _rmdir(e, at)
                elif not e.is_dir(follow_symlinks=False):
                    raise Occupied(1)
        finally:
            os.close(fd)
        _rmdir(name, parent_fd)


def remove_tree(parent: Path | str | int, name: str, *, decided: int) -> int:
    """Remove the tree ``parent/name`` and all it holds, if it holds no more than ``decided`` entries now.

    Counts again through the descriptor it then removes through; more entries
    than ``decided`` raises ``Appeared`` and nothing is removed. A tree that is
    or holds a mount point raises ``OtherFilesystem`` and nothing is removed.
    Links are unlinked, never followed. ``NotADirectoryError`` when ``name`` is
    not a directory (a link included); ``FileNotFoundError`` when it is gone.
    Returns how many entries it removed besides ``name`` itself.
    """
    with _parent(parent) as parent_fd:
        fd = open_dir(name, dir_fd=parent_fd)
        removed = 0
        try:
            device = os.fstat(parent_fd).st_dev
            if os.fstat(fd).st_dev != device:
                raise OtherFilesystem("is a mount point; left alone")
            now = tally_fd(fd, device=device).entries
            if now > decided:
                raise Appeared(now, decided)
            for at, e in _walk(fd, device):
                if isinstance(e, str):
                    os.rmdir(e, dir_fd=at)
                    removed += 1
                elif not e.is_dir(follow_symlinks=False):
                    try:
                        os.unlink(e.name, dir_fd=at)
                    except FileNotFoundError:
                        continue
                    removed += 1
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=parent_fd)
        return removed


def _rmdir(name: str, dir_fd: int) -> None:
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            raise Occupied(1) from exc
        raise


class _parent:
    """A descriptor of ``parent`` for the ``with`` block: opened here (following links) or the caller's."""

    def __init__(self, parent: Path | str | int) -> None:
        self.given = parent if isinstance(parent, int) else None
        self.path = None if isinstance(parent, int) else parent
        self.fd = -1

    def __enter__(self) -> int:
        if self.given is not None:
            return self.given
        assert self.path is not None
        self.fd = open_dir(self.path, follow=True)
        return self.fd

    def __exit__(self, *exc: object) -> None:
        if self.given is None and self.fd >= 0:
            os.close(self.fd)

"""The one safe unpacker: a set of files given as (relative path, content) written under a directory.

Two places write files they were handed: the agent a served manifest's files
(``datum.agent.fetch``), a fleet server a revision's snapshot
(``datum.fleet.rollouts.snapshot``). Both call ``unpack``, which keeps every
check either made:

- no path out of the target: a member's name is a plain relative path
  (``outside`` says which are not: absolute, empty, ``.`` or ``..`` parts, a
  NUL byte), refused before anything is written;
- no link followed: every directory on the way is opened with ``O_NOFOLLOW``
  under the one above it (``datum.safefs.open_dir``), and every file is made new (``O_EXCL |
  O_NOFOLLOW``), so a link planted in the target, or one the set itself
  makes, is never written through;
- a bound on size: the members' bytes together are at most ``limit``.

A ``Link`` member is made as a link (its target never read nor followed):
what the snapshot keeps of a link it must not resolve. Files are made 0600,
directories 0700. Refusals are ``Refused`` (a ``ValueError``); what the
filesystem refuses (a full disk, a file and a directory of one name, a link
on the way) is the ``OSError`` it raised.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from datum.safefs import open_dir

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Link(str):
    """A member kept as a link: its target, as ``readlink`` gave it (made, never followed)."""


class Refused(ValueError):
    """A member ``unpack`` does not write (a name out of the target, past the size bound): why."""


def outside(rel: str) -> bool:
    """Whether ``rel`` is not a plain relative path inside the target (absolute, an empty, ``.`` or
    ``..`` part, a NUL byte): the one rule of what names a place out of it."""
    return rel.startswith("/") or "\0" in rel or any(p in ("", ".", "..") for p in rel.split("/"))


def unpack(top: int, files: Iterable[tuple[str, bytes | Link]], limit: int) -> None:
    """Write ``files`` below the directory open at ``top`` (a fresh one: the caller renames it into place
    when done); ``Refused`` for a name out of it or more than ``limit`` bytes in all, checked before
    anything is written."""
    members = list(files)
    total = 0
    for rel, content in members:
        if outside(rel):
            raise Refused(f"a member that is not a plain path inside the target: {rel[:200]!r}")
        total += 0 if isinstance(content, Link) else len(content)
        if total > limit:
            raise Refused(f"the members hold more than {limit} bytes")
    for rel, content in members:
        _write(top, rel.split("/"), content)


def _write(top: int, parts: list[str], content: bytes | Link) -> None:
    """One member at ``parts`` below ``top``: the directories on the way made and opened without
    following a link, the leaf made new."""
    fd = os.dup(top)
    try:
        for part in parts[:-1]:
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            sub = open_dir(part, dir_fd=fd)  # a link on the way: NotADirectoryError
            os.close(fd)
            fd = sub
        if isinstance(content, Link):
            os.symlink(content, parts[-1], dir_fd=fd)
            return
        out = os.open(parts[-1], _NEW, 0o600, dir_fd=fd)
        with os.fdopen(out, "wb") as f:
            f.write(content)
    finally:
        os.close(fd)

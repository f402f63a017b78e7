"""A revision's files, kept so that any server can serve it again after the directory moved on.

A staged rollout serves two revisions at once: the new one (the fleet
directory as it is now) to the hosts already released, the previous one to
the rest. The previous one is no longer on disk, and a replica started after
the change never saw it: so the first server that records a revision keeps a
snapshot of its files in the store (``datum.store.snapshots``), and a server
that must serve another revision than its directory's writes that snapshot
under its home (``materialize``) and composes from there with
``datum.fleet.effective.effective`` like from the directory itself.

``capture`` keeps every file (``.git`` left out). A link is kept as what
composition would make of it, never more: one to a regular file inside the
directory as that file's content (it is the directory's own file); one to a
directory inside it as a link to the same place within the copy; any other
(out of the directory, dangling) as the link itself, its target never read,
so the copy refuses it exactly as the directory does (``outside the
manifest's directory``) and no file of the server's ever reaches the store
or a host. The copy is written into a fresh directory and
renamed into place, written by the one safe unpacker (``datum.unpack``, the
agent's too: ``O_NOFOLLOW | O_EXCL`` under directory descriptors, at most
``MAX_BYTES``): a link planted under ``<home>/revisions`` is never followed,
and a copy half written is never served.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import stat
import threading
import zlib
from pathlib import Path

from datum.unpack import Link, outside, unpack

MAX_BYTES = 256 * 1024 * 1024  # the largest fleet directory (uncompressed) a snapshot keeps
# The most a blob ``capture`` made can inflate to: MAX_BYTES in base64 (4/3) and each member's JSON around it.
MAX_BLOB_TEXT = MAX_BYTES * 4 // 3 + 64 * 1024 * 1024


class TooLarge(Exception):
    """The directory holds more than ``MAX_BYTES``: no snapshot (its rollout cannot hold hosts back)."""


def capture(resolved: Path) -> bytes:
    """The files under ``resolved`` (``.git`` left out) as one compressed blob: ``[path, base64]`` a file,
    ``[path, null, target]`` a link kept as a link."""
    entries: list[list[str | None]] = []
    total = 0
    for top, dirs, names in os.walk(resolved):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for name in [d for d in dirs if os.path.islink(os.path.join(top, d))]:  # a link to a directory
            dirs.remove(name)
            path = os.path.join(top, name)
            real = os.path.realpath(path)
            inside = os.path.commonpath([real, str(resolved)]) == str(resolved)
            target = os.path.relpath(real, top) if inside else os.readlink(path)  # inside: within the copy too
            entries.append([os.path.relpath(path, resolved), None, target])
        for name in sorted(names):
            path = os.path.join(top, name)
            rel = os.path.relpath(path, resolved)
            content = _content(resolved, path)
            if isinstance(content, Link):
                entries.append([rel, None, str(content)])
                continue
            total += len(content)
            if total > MAX_BYTES:
                raise TooLarge(f"{resolved} holds more than {MAX_BYTES} bytes")
            entries.append([rel, base64.b64encode(content).decode()])
    return zlib.compress(json.dumps(entries, separators=(",", ":")).encode(), 6)


def _content(resolved: Path, path: str) -> bytes | Link:
    """What the copy holds at ``path``: a regular file's bytes (a link's to a regular file inside ``resolved``:
    its target's), else the link itself. Opened without following a link: a file swapped for one meanwhile
    reads as unreadable, an empty file (as ``content_digest``)."""
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            real = os.path.realpath(path)
            inside = os.path.commonpath([real, str(resolved)]) == str(resolved)
            if not inside or not os.path.isfile(real):
                return Link(os.readlink(path))
            path = real
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return b""
            return f.read()
    except (OSError, ValueError):  # gone or unreadable: as content_digest, an empty file
        return b""


def files_of(blob: bytes) -> list[tuple[str, bytes | Link]]:
    """The (relative path, content or ``Link``) pairs of a blob ``capture`` made; a ValueError for a path
    that climbs, or a blob that inflates past ``MAX_BLOB_TEXT`` or is cut short."""
    out: list[tuple[str, bytes | Link]] = []
    for rel, content, *link in json.loads(_inflate(blob, MAX_BLOB_TEXT)):
        if outside(rel):
            raise ValueError(f"a snapshot path that is not plain: {rel!r}")
        out.append((rel, Link(link[0]) if content is None and link else base64.b64decode(content)))
    return out


def _inflate(blob: bytes, limit: int) -> bytes:
    """``blob`` decompressed, refused (a ValueError) past ``limit`` bytes or cut short: a stored row is read
    as strictly as a directory is captured, so a blob nobody's ``capture`` made (a hand edit of the store, a
    bomb) never inflates without bound in the server."""
    inflater = zlib.decompressobj()
    text = inflater.decompress(blob, limit)
    if inflater.unconsumed_tail:
        raise ValueError(f"a snapshot that inflates past {limit} bytes")
    if not inflater.eof:
        raise ValueError("a snapshot cut short")
    return text


_LOCK = threading.Lock()
_DONE: dict[tuple[str, str], Path] = {}


FORMAT = b"2"  # 2: links kept as links (a copy an earlier release wrote under another name is never reused)


def folder(revision: str) -> str:
    """The directory name a revision's copy has under ``<home>/revisions``: of the revision and this format."""
    return hashlib.sha256(FORMAT + b"\0" + revision.encode()).hexdigest()[:32]


def materialized(home: Path, revision: str) -> Path | None:
    """Where this process already wrote ``revision``'s files under ``home`` and they still are (a ``stat``, no
    read), else None: a copy removed under the server (a cleaned home) is written again, not served missing."""
    done = _DONE.get((str(home), revision))
    if done is not None and not os.path.isdir(done):
        with _LOCK:
            _DONE.pop((str(home), revision), None)
        return None
    return done


def materialize(home: Path, revision: str, blob: bytes) -> Path:
    """The revision's files written under ``home/revisions/<digest of id>`` (once per process), resolved."""
    key = (str(home), revision)
    with _LOCK:
        done = _DONE.get(key)
        if done is not None and os.path.isdir(done):
            return done
        root = home / "revisions"
        os.makedirs(root, mode=0o700, exist_ok=True)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)  # a link at revisions: refused
        try:
            name = folder(revision)
            if not _is_real_dir(fd, name):
                temp = f".{name}.{secrets.token_hex(6)}"
                os.mkdir(temp, 0o700, dir_fd=fd)
                _write(fd, temp, files_of(blob))
                _clear(fd, name)
                os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
        finally:
            os.close(fd)
        found = (root / name).resolve()
        _DONE[key] = found
        return found


def _is_real_dir(fd: int, name: str) -> bool:
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(st.st_mode)


def _clear(fd: int, name: str) -> None:
    """Whatever is at ``name`` that is not a directory (a planted link or file) goes, unfollowed."""
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass


def _write(root_fd: int, temp: str, files: list[tuple[str, bytes | Link]]) -> None:
    """The files written under ``temp`` with the one safe unpacker (``datum.unpack``), at most ``MAX_BYTES``
    as ``capture`` kept: no path out of it, no link followed (a ``Link`` is made, never written through)."""
    base = os.open(temp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root_fd)
    try:
        unpack(base, files, MAX_BYTES)
    finally:
        os.close(base)

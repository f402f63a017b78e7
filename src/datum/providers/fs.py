"""Paths under ``--root`` and atomic writes: the one place either is done.

A host path resolves inside the root the way a chroot sees it: an absolute
symlink target is taken relative to the root, and a symlink or ``..`` that
would climb above the root is refused, never followed.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from datum.providers.base import ProviderError

_MAX_LINKS = 40


class Escape(ProviderError):
    """A path that would leave the root."""


def resolve(
    root: Path, host_path: str, *, follow_last: bool = True, cache: dict[str, str] | None = None
) -> Path:
    """The real path of ``host_path`` inside ``root``; refuse one that escapes it.

    Components that do not exist yet are kept as they are (the resource may
    create them). ``follow_last=False`` leaves a final symlink unresolved, for
    resources that manage the link itself. ``cache`` remembers resolved parent
    directories within one pass (the pass drops it after every change).
    """
    top = os.path.abspath(root)
    parent, _, last = host_path.rstrip("/").rpartition("/")
    key = f"{top}\0{parent}"
    base = cache.get(key) if cache is not None else None
    if base is None:
        base = _walk(top, parent, True, host_path)
        if cache is not None:
            cache[key] = base
    if not last or last == ".":
        return Path(base)
    candidate = os.path.join(base, last)
    if last != ".." and not (follow_last and os.path.islink(candidate)):
        return Path(candidate)  # the common case: nothing left to resolve
    start = [p for p in base[len(top) :].split("/") if p]
    return Path(_walk(top, last, follow_last, host_path, start))


def _walk(
    top: str, path: str, follow_last: bool, original: str, start: list[str] | None = None
) -> str:
    """Resolve ``path`` component by component under ``top`` as a chroot would, from ``start``."""
    todo = [p for p in path.split("/") if p not in ("", ".")]
    todo.reverse()
    done: list[str] = list(start or ())
    hops = 0
    while todo:
        part = todo.pop()
        if part == "..":
            if not done:
                raise Escape(f"{original} escapes the root {top}")
            done.pop()
            continue
        here = os.path.join(top, *done, part)
        if (todo or follow_last) and os.path.islink(here):
            hops += 1
            if hops > _MAX_LINKS:
                raise Escape(f"{original}: too many levels of symbolic links")
            target = os.readlink(here)
            if target.startswith("/"):
                if top != "/":
                    target = _absolute_under(top, target, here, original)
                done = []
            todo.extend(reversed([p for p in target.split("/") if p not in ("", ".")]))
            continue
        done.append(part)
    return os.path.join(top, *done) if done else top


def _absolute_under(top: str, target: str, link: str, original: str) -> str:
    """Where an absolute link under a sandbox root leads, as a path from the root.

    A chroot reads ``/run`` as the root's own ``run`` (Debian's ``/var/run ->
    /run``), so a target that exists inside the root is followed there. A
    target naming the root by its real path is inside too. Anything else is
    a symlink out of the root: refused, never followed.
    """
    real = os.path.normpath(target)
    if os.path.commonpath([top, real]) == top:
        return real[len(top) :] or "/"
    if os.path.lexists(os.path.join(top, real.lstrip("/"))):
        return real
    raise Escape(f"{original}: {link} links out of the root to {target}")


def write_atomic(
    path: Path, data: bytes, *, mode: int | None = None, uid: int = -1, gid: int = -1
) -> None:
    """Replace ``path`` with ``data`` so a crash leaves the old file or the new one, never half.

    The temporary file gets its mode and owner before the rename; an existing
    file's mode and owner are kept when not given.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        old = os.lstat(path)
    except FileNotFoundError:
        old = None
    if mode is None:
        mode = stat.S_IMODE(old.st_mode) if old and stat.S_ISREG(old.st_mode) else 0o644
    if old is not None and stat.S_ISREG(old.st_mode):
        uid = old.st_uid if uid == -1 else uid
        gid = old.st_gid if gid == -1 else gid
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".datum-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            if uid != -1 or gid != -1:
                os.fchown(fh.fileno(), uid, gid)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make a rename or an unlink in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_bytes(path: Path) -> bytes | None:
    """The file's content, or None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError as exc:
        raise ProviderError(f"{path} is a directory") from exc


def lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError as exc:
        raise ProviderError(f"a parent of {path} is not a directory") from exc


def remove(path: Path) -> None:
    """Remove a file, a symlink or a whole directory tree, without following links."""
    st = lstat(path)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        import shutil

        shutil.rmtree(path)
    else:
        os.unlink(path)
    fsync_dir(path.parent)


def kind(st: os.stat_result | None) -> str:
    """``absent``, ``file``, ``directory``, ``link`` or ``other``, for reports."""
    if st is None:
        return "absent"
    if stat.S_ISLNK(st.st_mode):
        return "link"
    if stat.S_ISDIR(st.st_mode):
        return "directory"
    if stat.S_ISREG(st.st_mode):
        return "file"
    return "other"


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


def set_meta(path: Path, mode: int | None, uid: int | None, gid: int | None) -> None:
    """Set the mode and ownership that are managed, leave the rest alone."""
    if uid is not None or gid is not None:
        os.chown(
            path, -1 if uid is None else uid, -1 if gid is None else gid, follow_symlinks=False
        )
    if mode is not None:
        os.chmod(path, mode)


def unified(host_path: str, before: bytes | None, after: bytes | None) -> str:
    """A unified diff of file content for plans and drift reports."""
    import difflib

    try:
        a = (before or b"").decode("utf-8")
        b = (after or b"").decode("utf-8")
    except UnicodeDecodeError:
        return f"binary content differs ({len(before or b'')} bytes, want {len(after or b'')})\n"
    lines = difflib.unified_diff(
        a.splitlines(keepends=True),
        b.splitlines(keepends=True),
        fromfile=f"a{host_path}" if before is not None else "/dev/null",
        tofile=f"b{host_path}" if after is not None else "/dev/null",
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )

"""Every read a pass makes of the host, made here and recorded once: what the idle pass replays.

The engine reads the host through these functions alone: a path's ``lstat``
(its kind and signature: mode, inode, size, times, owner), whether something is
there and of which kind, a link's target, a regular file's bytes, a directory's
names or the whole tree below it, a path's real path, and the facts of the
running machine (kernel, node name, boot id, CPUs, memory). A host path is
resolved inside the root here too (``real_path``, as a chroot would), with
those same reads: where the engine looked is what it recorded. Between ``start``
and ``stop`` each read is also recorded, keyed by what was read and where, with
what it returned; a command run (``opaque``) makes the record unreplayable,
unless its answer is a function of files alone (``answered_by``: rpm's query of its
database), which are recorded in its stead.

``unchanged`` replays a record: each read is made again the way it was made
and compared. A file's bytes are trusted by their ``lstat`` signature, as git's
index does, unless the file changed within ``RACY_NS`` of the pass's start (a
file time can be coarse): then they are read again and compared by digest. So
the idle pass (``datum.host.idle``) answers only when every read of the engine
would return what it returned, and lists no dependency by hand.

It imports nothing the idle pass would pay for (no ``typing``, ``pathlib``,
``enum``, ``json``): the replay is close to a bare loop over the same paths.
"""

from __future__ import annotations

import errno
import os

from datum.providers.errors import ProviderError

try:  # CPython's own BLAKE2: hashlib would load OpenSSL
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter without the module
    from hashlib import blake2b

TYPE_CHECKING = False  # the idle pass's cold start: no typing imported
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any

RACY_NS = 1_100_000_000  # a file changed this close to a pass's start may have changed during it
_S_IFMT, _S_IFREG, _S_IFLNK = 0o170000, 0o100000, 0o120000
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotRegular(OSError):
    """What was opened is not a regular file (swapped since its ``lstat``)."""


class Record:
    """The reads of one pass: ``seen`` by (kind, path) with what the read returned, the first time;
    ``opaque``: why it cannot be replayed (a command ran), empty when it can; ``started``: when
    the pass started (ns since the epoch), for the racy window."""

    __slots__ = ("seen", "opaque", "started")

    def __init__(self, started: int) -> None:
        self.seen: dict[tuple[str, str], Any] = {}
        self.opaque: list[str] = []
        self.started = started

    def reads(self) -> list[tuple[str, str, Any]]:
        """The record as plain data (``marshal`` stores it): ``(kind, path, value)``; an ``lstat``
        the same read of the file's bytes already holds is left out (one ``lstat`` on replay)."""
        seen = self.seen
        return [
            (kind, path, value)
            for (kind, path), value in seen.items()
            if not (kind == "stat" and (b := seen.get(("bytes", path))) is not None and b[0] == value)
        ]


_current: Record | None = None
_depth = 0  # above 0 while a read of this module runs (tests/host/test_reads_audit.py asks)


def start() -> Record:
    """Record every read from now on (a new record: what an earlier pass read is forgotten)."""
    import time

    global _current
    _current = Record(time.time_ns())
    return _current


def stop() -> Record | None:
    """Stop recording; the record made since ``start`` (None: none was started)."""
    global _current
    found, _current = _current, None
    return found


def reading() -> bool:
    """Whether one of this module's reads is being made now (the audit-hook test's question)."""
    return _depth > 0


def opaque(why: str) -> None:
    """A read no replay can make again (a command's answer): the record stands for nothing."""
    if _current is not None:
        _current.opaque.append(why)


def _data_now(path: str) -> tuple[int, int, int, int] | int:
    try:
        st = os.lstat(path)
    except OSError as exc:
        return exc.errno or 1
    return (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns)


def answered_by(paths: Iterable[str], command: Callable[[], Any]) -> Any:
    """``command()``, a command whose answer is a function of the files at ``paths`` alone (rpm's query
    of its database, of a package file), recorded as what each file's ``lstat`` says of its content,
    made before it runs (kind, inode, size and modification time, not the change time: sqlite's
    write-ahead log has it moved by every reader), instead of as a command: a replay that finds every
    file as it was stands for the answer. A file modified within ``RACY_NS`` of the pass's start (a
    time can be coarse: it may change again with the same signature) leaves the record standing for
    nothing, as any command does."""
    import time

    recent = (_current.started if _current is not None else time.time_ns()) - RACY_NS
    racy = []
    for path in paths:
        found = _recorded("data", path, _data_now, path)
        if isinstance(found, tuple) and found[3] > recent:
            racy.append(path)
    record = _current
    if record is None:
        return command()
    before = len(record.opaque)
    try:
        return command()
    finally:
        del record.opaque[before:]  # the command's own note: the reads above stand for it
        record.opaque.extend(f"{path} changed as the pass began" for path in racy)


def _note(kind: str, path: str, value: Any) -> None:
    if _current is not None:
        _current.seen.setdefault((kind, path), value)


def _recorded(kind: str, key: str, now: Callable[..., Any], *args: Any, noted: Callable[[Any], Any] | None = None) -> Any:
    """``now(*args)``, made as one of this module's reads (``reading`` is true while it runs) and
    recorded under ``(kind, key)``: what it returned, or ``noted`` of it. Nothing is recorded when
    it raises."""
    global _depth
    _depth += 1
    try:
        found = now(*args)
    finally:
        _depth -= 1
    _note(kind, key, found if noted is None else noted(found))
    return found


def signature(st: os.stat_result) -> tuple[int, int, int, int, int, int, int]:
    """What an ``lstat`` says of a path: mode (kind included), inode, size, times, owner and group."""
    return (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_uid, st.st_gid)


def digest(data: bytes) -> str:
    """What bytes are remembered by: BLAKE2b-256, hex (``datum.host.digest`` is this)."""
    return blake2b(data, digest_size=32).hexdigest()


# -- the reads ------------------------------------------------------------------------------------


def _lstat_now(path: str) -> os.stat_result | OSError:
    try:
        return os.lstat(path)
    except OSError as exc:
        return exc


def _lstat_value(found: os.stat_result | OSError) -> tuple[int, ...] | int | None:
    """What an ``lstat`` is recorded and replayed by: its signature, or the error's number."""
    return found.errno if isinstance(found, OSError) else signature(found)


def lstat(path: str) -> os.stat_result:
    """``os.lstat``, recorded (its signature, or the error it raised: absence is a read too)."""
    found: os.stat_result | OSError = _recorded("stat", path, _lstat_now, path, noted=_lstat_value)
    if isinstance(found, OSError):
        raise found
    return found


class Owner:
    """What ``owner`` read of a path: the ``lstat`` fields the link rule asks (``st_mode``, ``st_uid``,
    ``st_gid``)."""

    __slots__ = ("st_mode", "st_uid", "st_gid")

    def __init__(self, mode: int, uid: int, gid: int) -> None:
        self.st_mode, self.st_uid, self.st_gid = mode, uid, gid


def _owner_now(path: str) -> tuple[int, int, int] | int:
    try:
        st = os.lstat(path)
    except OSError as exc:
        return exc.errno or 1
    return (st.st_mode, st.st_uid, st.st_gid)


def owner(path: str) -> Owner:
    """The mode (kind included), owner and group of ``path`` (a link is not followed), recorded as
    those three alone; OSError when it cannot be read."""
    found: tuple[int, int, int] | int = _recorded("owner", path, _owner_now, path)
    if isinstance(found, int):
        raise OSError(found, os.strerror(found), path)
    return Owner(*found)


def _follow_now(path: str) -> tuple[int, ...] | int:
    try:
        return signature(os.stat(path))
    except OSError as exc:
        return exc.errno or 1


def stat(path: str) -> tuple[int, ...] | int:
    """The signature of what ``path`` leads to, links followed (Datum's code, where modules are
    found), or the error's number: recorded, never raised."""
    found: tuple[int, ...] | int = _recorded("follow", path, _follow_now, path)
    return found


def _kind_now(path: str) -> int:
    try:
        return os.lstat(path).st_mode & _S_IFMT
    except OSError as exc:
        return -(exc.errno or 1)


def kind(path: str) -> int | None:
    """The file type bits of what is at ``path`` (``S_IFMT``; a link is not followed), None when
    nothing can be found there: ``os.path.islink`` and ``lexists`` as a read that records only that."""
    found: int = _recorded("kind", path, _kind_now, path)
    return found if found > 0 else None


def _link_now(path: str) -> str | int:
    try:
        return os.readlink(path)
    except OSError as exc:
        return exc.errno or 1


def readlink(path: str) -> str:
    """``os.readlink``, recorded."""
    found: str | int = _recorded("link", path, _link_now, path)
    if isinstance(found, int):
        raise OSError(found, os.strerror(found), path)
    return found


def _open_read(path: str, size: int, same: os.stat_result | None = None) -> bytes | None:
    """A regular file's bytes, never through a final link nor blocking (None: gone since); with
    ``same``, only the file that ``lstat`` found (a path swapped since is ``NotRegular``)."""
    try:
        fd = os.open(path, _READ)
    except FileNotFoundError:
        return None
    try:
        opened = os.fstat(fd)
        if opened.st_mode & _S_IFMT != _S_IFREG:
            raise NotRegular(f"{path} is not a regular file")
        if same is not None and (opened.st_ino, opened.st_dev) != (same.st_ino, same.st_dev):
            raise NotRegular(f"{path} changed while it was read")
        first = os.read(fd, size + 1)  # all of it in one read, unless it grew since
        if len(first) <= size:
            return first
        parts = [first]
        while chunk := os.read(fd, 1 << 20):
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def content(path: str, st: os.stat_result) -> bytes | None:
    """The bytes of the regular file at ``path`` whose ``lstat`` (``st``) was just made; None when it
    is gone. ``NotRegular`` when what was opened is not a regular file; OSError as raised."""
    data: bytes | None = _recorded(
        "bytes", path, _open_read, path, st.st_size, st,
        noted=lambda found: (signature(st), None if found is None else digest(found)),
    )
    return data


def remember(path: str, data: bytes) -> None:
    """Bytes read elsewhere (the manifest, the configuration, an included manifest), recorded by
    their digest alone: a replay reads them again."""
    _note("bytes", path, (None, digest(data)))


def read_bytes(path: str) -> bytes | None:
    """A regular file's bytes (``lstat`` then ``content``); None when nothing is there. A link or
    anything but a regular file is ``NotRegular``."""
    try:
        st = lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if st.st_mode & _S_IFMT != _S_IFREG:
        raise NotRegular(f"{path} is not a regular file")
    return content(path, st)


def _names_now(path: str, fd: int | None = None) -> list[str] | int:
    try:
        own = os.open(path, _DIR) if fd is None else None
    except OSError as exc:
        return exc.errno or 1
    try:
        return sorted(os.listdir(fd if own is None else own))
    finally:
        if own is not None:
            os.close(own)


def _listing_value(found: list[str] | int) -> str | int:
    """What a listing is recorded and replayed by: the digest of its names, or the error's number."""
    return found if isinstance(found, int) else digest("\0".join(found).encode())


def listdir(path: str, fd: int | None = None) -> list[str]:
    """The names in the directory ``path`` (read through ``fd`` when given, opened without
    following a link otherwise), sorted; a listing is a read (purge, ``/boot``'s kernels)."""
    found: list[str] | int = _recorded("list", path, _names_now, path, fd, noted=_listing_value)
    if isinstance(found, int):
        raise OSError(found, os.strerror(found), path)
    return found


def realpath(path: str) -> str:
    """``os.path.realpath``, recorded (where a link out of the manifest's directory leads)."""
    found: str = _recorded("real", path, os.path.realpath, path)
    return found


def tree(path: str, below: Callable[[int], Iterable[Any]]) -> Iterator[Any]:
    """``below(fd)`` of the directory ``path`` (opened without following a link; ``datum.safefs.below``:
    entries with ``path`` and ``st``) as they come, recorded as one read: every path below with its
    kind, mode and owner. Left before its end, the record stands for nothing (what was not read
    cannot be replayed). ``NotADirectoryError`` when ``path`` is not a directory (a link included)."""
    global _depth
    _depth += 1
    try:
        fd = os.open(path, _DIR)
    except OSError as exc:
        _note("tree", path, exc.errno or 1)
        if exc.errno == errno.ELOOP:
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", path) from exc
        raise
    finally:
        _depth -= 1
    hashed = blake2b(digest_size=32)
    done = False
    try:
        walk = iter(below(fd))
        while True:
            _depth += 1
            try:
                e = next(walk, None)
            finally:
                _depth -= 1
            if e is None:
                done = True
                break
            hashed.update(_tree_line(e.path, e.st))
            yield e
    finally:
        os.close(fd)
        if done:
            _note("tree", path, hashed.hexdigest())
        else:
            opaque(f"{path}: a walk left part-way")


def _tree_line(rel: str, st: os.stat_result) -> bytes:
    return f"{rel}\0{st.st_mode}\0{st.st_uid}\0{st.st_gid}\n".encode()


def _tree_now(path: str) -> str | int:
    from datum import safefs  # a Directory's recurse only: what the engine walks with

    try:
        fd = os.open(path, _DIR)
    except OSError as exc:
        return exc.errno or 1
    hashed = blake2b(digest_size=32)
    try:
        for e in safefs.below(fd):
            hashed.update(_tree_line(e.path, e.st))
    finally:
        os.close(fd)
    return hashed.hexdigest()


# -- a path inside the root ------------------------------------------------------------------------
# A host path resolves inside the root the way a chroot sees it: an absolute symbolic link's
# target is taken relative to the root, and a link or ``..`` that would climb above the root is
# refused, never followed. Resolving is made of the reads above, so what the engine resolved is
# what the record holds, and what a replay resolves again.

_MAX_LINKS = 40




class Escape(ProviderError):
    """A path that would leave the root."""


class Untrusted(ProviderError):
    """A link on the way that root may not follow (``datum.providers.links``): ``link`` is its host
    path, ``uids`` the owners of the link and of its directory, ``why`` what the rule found."""

    def __init__(self, original: str, link: str, uids: tuple[int, int], why: str) -> None:
        from datum.providers.links import RULE

        where = "" if original.rstrip("/") == link else f"{original}: "
        super().__init__(f"{where}{link} is a link {why}; {RULE}")
        self.original, self.link, self.uids, self.why = original, link, uids, why


def _check_link(top: str, here: str, original: str) -> None:
    """Refuse the link at ``here`` unless the link rule lets root follow it. The owner and mode of
    the link and of its directory are reads, recorded (``owner``): a replay sees one that changed,
    and not a directory's times, which change with every file made in it."""
    from datum.providers.links import refusal

    link = owner(here)
    directory = owner(os.path.dirname(here))
    why = refusal(link, directory)
    if why is not None:
        shown = here[len(top) :] if top != "/" else here
        raise Untrusted(original, shown or "/", (link.st_uid, directory.st_uid), why)


def real_path(
    root: str,
    host_path: str,
    *,
    follow_last: bool = True,
    cache: dict[str, str] | None = None,
    stats: dict[str, os.stat_result] | None = None,
) -> str:
    """The real path of ``host_path`` inside ``root``; ``Escape`` when it would leave it.

    Components that do not exist yet are kept as they are (the resource may
    create them). ``follow_last=False`` leaves a final symbolic link unresolved,
    for resources that manage the link itself. ``cache`` remembers resolved
    parent directories within one pass (the pass drops it after every change).

    ``stats``, when given, receives the ``lstat`` of the final component that the
    check for a final link made, keyed by the returned path, so the provider that
    observes it next need not ``lstat`` it again.
    """
    top = cache.get(root) if cache is not None else None
    if top is None:
        top = os.path.abspath(root)
        if cache is not None:
            cache[root] = top  # a root has no NUL: never a parent's key
    parent, _, last = host_path.rstrip("/").rpartition("/")
    key = f"{top}\0{parent}"
    base = cache.get(key) if cache is not None else None
    if base is None:
        base = _walk(top, parent, True, host_path)
        if cache is not None:
            cache[key] = base
    if not last or last == ".":
        return base
    candidate = f"{base}{last}" if base.endswith("/") else f"{base}/{last}"
    if last == "..":
        return _walk(top, last, follow_last, host_path, _from(top, base))
    if not follow_last:
        return candidate
    try:
        st = lstat(candidate)
    except OSError:  # absent, or a parent that is not a directory: the observer says which
        return candidate
    if st.st_mode & _S_IFMT != _S_IFLNK:
        if stats is not None:
            stats[candidate] = st
        return candidate  # the common case: nothing left to resolve
    return _walk(top, last, follow_last, host_path, _from(top, base))


def _from(top: str, base: str) -> list[str]:
    return [p for p in base[len(top) :].split("/") if p]


def _walk(
    top: str,
    path: str,
    follow_last: bool,
    original: str,
    start: list[str] | None = None,
    seen: set[str] | None = None,
) -> str:
    """Resolve ``path`` component by component under ``top`` as a chroot would, from ``start``.

    ``seen``, when given, collects every path the walk passes through (links included).
    """
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
        if seen is not None:
            seen.add(here)
        if (todo or follow_last) and kind(here) == _S_IFLNK:
            _check_link(top, here, original)
            hops += 1
            if hops > _MAX_LINKS:
                raise Escape(f"{original}: too many levels of symbolic links")
            target = readlink(here)
            if target.startswith("/"):
                if top != "/":
                    target = _absolute_under(top, target, here, original)
                done = []
            todo.extend(reversed([p for p in target.split("/") if p not in ("", ".")]))
            continue
        done.append(part)
    return os.path.join(top, *done) if done else top


def passes_through(root: str, host_path: str) -> set[str]:
    """Every real path under ``root`` that resolving ``host_path`` visits: each component, each link and its target.

    A Directory purge keeps all of them, so an alias (``/var/run -> /run``) or a
    link on the way is the same path as what it leads to. Empty when the path escapes.
    """
    seen: set[str] = set()
    try:
        _walk(os.path.abspath(root), host_path, True, host_path, seen=seen)
    except (Escape, Untrusted, OSError):
        pass
    return seen


def _absolute_under(top: str, target: str, link: str, original: str) -> str:
    """Where an absolute link under a sandbox root leads, as a path from the root.

    A chroot reads ``/run`` as the root's own ``run`` (Debian's ``/var/run ->
    /run``). So does Datum when the target exists inside the root, and also when
    it exists nowhere yet (an image root's ``/etc/resolv.conf ->
    /run/systemd/resolve/stub-resolv.conf`` before anything made it). A target
    naming the root by its real path is inside too. A target that exists only
    outside the root, on the running system, is a symlink out: refused, never
    followed. A ``..`` that would climb above the root is refused by the walk.
    """
    real = os.path.normpath(target)
    if os.path.commonpath([top, real]) == top:
        return real[len(top) :] or "/"
    if kind(os.path.join(top, real.lstrip("/"))) is not None or kind(real) is None:
        return target
    raise Escape(f"{original}: {link} links out of the root to {target}")


# -- the running machine ------------------------------------------------------------------------


def _text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _memory_kb(_arg: str) -> int:
    for line in _text("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    return 0


_FACTS: dict[str, Callable[[str], Any]] = {
    "uname": lambda field: getattr(os.uname(), field),
    "cpus": lambda _arg: os.cpu_count() or 1,
    "memory_kb": _memory_kb,
    "text": lambda path: _text(path).strip(),  # a file of the running machine (the boot id)
}


def fact(name: str, arg: str = "") -> Any:
    """A fact of the running machine (``_FACTS``), recorded as its value: the kernel's release,
    the node name, a boot id, CPUs, memory. A replay asks it again."""
    return _recorded("fact", f"{name}:{arg}", _FACTS[name], arg)


def boot_id(boot_id_file: str) -> str:
    """The running boot's id; ``DATUM_BOOT_ID_FILE`` overrides the configured file (tests)."""
    found: str = fact("text", os.environ.get("DATUM_BOOT_ID_FILE") or boot_id_file)
    return found


def kernel() -> str:
    """The running kernel's release."""
    found: str = fact("uname", "release")
    return found


def node_name() -> str:
    """What gethostname(2) returns, without importing socket."""
    found: str = fact("uname", "nodename")
    return found


# -- a replay -----------------------------------------------------------------------------------


def unchanged(reads: list[tuple[str, str, Any]], started: int) -> bool:
    """Whether every read of a record would return what it returned (``Record.reads``; ``started``
    its ``Record.started``)."""
    recent = started - RACY_NS
    for kind, path, value in reads:
        if kind == "bytes":
            sig, known = value
            try:
                st = os.lstat(path)
            except OSError:
                return False
            now = signature(st)
            if sig is not None and now != sig:
                return False
            if sig is None or known is None or max(now[3], now[4]) > recent:  # the bytes themselves
                try:
                    data = _open_read(path, st.st_size)
                except OSError:
                    return False
                if data is None or digest(data) != known:
                    return False
        elif kind == "stat":
            if _lstat_value(_lstat_now(path)) != value:
                return False
        elif kind == "follow":
            if _follow_now(path) != value:
                return False
        elif kind == "owner":
            if _owner_now(path) != value:
                return False
        elif kind == "data":
            if _data_now(path) != value:
                return False
        elif kind == "kind":
            if _kind_now(path) != value:
                return False
        elif kind == "link":
            if _link_now(path) != value:
                return False
        elif kind == "list":
            if _listing_value(_names_now(path)) != value:
                return False
        elif kind == "real":
            if os.path.realpath(path) != value:
                return False
        elif kind == "tree":
            if _tree_now(path) != value:
                return False
        elif kind == "fact":
            name, _, arg = path.partition(":")
            if _FACTS[name](arg) != value:
                return False
        else:  # a kind this Datum does not know: an entry of another version
            return False
    return True

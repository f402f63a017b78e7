"""The account databases under ``--root`` (etc/passwd, group, shadow, gshadow): read, look up, edit.

Names resolve against the root's databases, not the running system's, because ownership
inside a root means that root's users.

Reads (``read_table``: observe, owner lookups) take no lock. They go through
``datum.providers.reads``, so the idle pass replays them, and are kept in ``ctx.cache`` for
the pass.

An edit is one transaction under the locks shadow-utils takes (``locked``), so Datum and
``useradd``, ``passwd``, ``vipw`` or another Datum never edit the databases at once:

- glibc's ``lckpwdf``: an fcntl write lock over the whole of ``<root>/etc/.pwd.lock``, the lock
  useradd and passwd take on the running system (``--prefix`` skips it);
- commonio's lock of each database: ``<file>.<pid>`` holding the pid, hard-linked to
  ``<file>.lock``; every shadow-utils tool takes it, ``--prefix`` included. A lock whose pid is
  dead is removed, as commonio removes it.

A held lock is waited for, polling, ``LOCK_WAIT`` seconds in all (lckpwdf's timeout, and
commonio's 15 tries a second apart); then the resource fails naming the lock file and, when it
is known, the pid holding it, with nothing written.

Under the locks the databases are read again, not taken from the pass's cache: an account
added since observe (by useradd, say) is kept and its ids are not handed out again. The edits
are staged and written when the transaction ends without an error, only the files that
changed, each replaced atomically (rename) after its previous content is kept as
``<file>-``, as commonio keeps it. The pass's cached tables are dropped after.

The files are written gshadow, group, shadow, passwd: the row a resource's plan looks at is
written last (a user's passwd row, a group's group row), so a crash between two files leaves
that row as it was, and the next pass sees the same difference and makes the whole edit
again. A new user's passwd row thus never comes before its shadow row (created locked) nor
before its private group; a removed user leaves every group list, its group and etc/shadow
before its passwd row goes. useradd writes passwd first; its crash between the two files
leaves a user with no shadow row, which Datum's order never does.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from datum.core import hostreasons
from datum.providers import reads
from datum.providers.base import HostContext, ProviderError
from datum.providers.fs import read_bytes, write_at

PASSWD = "/etc/passwd"
GROUP = "/etc/group"
SHADOW = "/etc/shadow"
GSHADOW = "/etc/gshadow"
PWD_LOCK = "/etc/.pwd.lock"  # glibc's lckpwdf

# Comma-separated name lists: a group's members (group and gshadow), its administrators (gshadow).
MEMBERS = 3
ADMINS = 2

# How long a held lock is waited for, in all, and how often it is tried meanwhile (seconds).
LOCK_WAIT = 15.0
_POLL = 0.05

# The order shadow-utils takes the locks in (useradd: passwd, shadow, group, gshadow): one order
# for everyone, so two editors never each hold a lock the other waits for.
_LOCK_ORDER = (PASSWD, SHADOW, GROUP, GSHADOW)
# The order the files are written in: the row a plan looks at last (see the module docstring).
_WRITE_ORDER = (GSHADOW, GROUP, SHADOW, PASSWD)

# Databases whose entries must not be readable by everyone.
_SECRET = {SHADOW: 0o640, GSHADOW: 0o640}

# struct flock (Linux, 64-bit off_t): l_type, l_whence, l_start, l_len, l_pid, padded to 32 bytes.
_FLOCK = struct.Struct("hhqqi")
_FLOCK_SIZE = 32

_T = TypeVar("_T")

# How lckpwdf opens etc/.pwd.lock (O_NOFOLLOW added: a link there is refused), and commonio
# its <file>.<pid> (O_EXCL added there).
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True, repr=False)
class Table:
    """One colon-separated database: its rows in file order."""

    path: str
    rows: tuple[tuple[str, ...], ...]

    def __repr__(self) -> str:  # shadow and gshadow hold hashes: never in a repr or a traceback
        if self.path in _SECRET:
            return f"Table({self.path!r}, {len(self.rows)} rows)"
        return f"Table({self.path!r}, {self.rows!r})"

    def get(self, name: str) -> tuple[str, ...] | None:
        for row in self.rows:
            if row and row[0] == name:
                return row
        return None

    def by_id(self, ident: int, column: int = 2) -> tuple[str, ...] | None:
        for row in self.rows:
            if len(row) > column and row[column] == str(ident):
                return row
        return None

    def ids(self, column: int = 2) -> set[int]:
        return {int(r[column]) for r in self.rows if len(r) > column and r[column].isdigit()}

    def with_row(self, name: str, row: tuple[str, ...] | None) -> Table:
        """A copy where ``name``'s row is replaced by ``row`` (appended if new, removed if None)."""
        out: list[tuple[str, ...]] = []
        found = False
        for r in self.rows:
            if r and r[0] == name:
                found = True
                if row is not None:
                    out.append(row)
            else:
                out.append(r)
        if not found and row is not None:
            out.append(row)
        return Table(self.path, tuple(out))

    def without(self, name: str, *columns: int) -> Table:
        """A copy where ``name`` is taken out of the name lists in ``columns`` of every row (a
        user leaving every group: userdel edits group's members, gshadow's administrators and
        members); rows it was not in are kept as they were."""
        out = []
        for row in self.rows:
            if any(name in listed(row, c) for c in columns):
                row = tuple(
                    ",".join(n for n in listed(row, i) if n != name) if i in columns else value
                    for i, value in enumerate(row)
                )
            out.append(row)
        return Table(self.path, tuple(out))


def listed(row: tuple[str, ...], column: int) -> list[str]:
    """The names in a row's comma-separated list at ``column`` (none when the row is shorter)."""
    return [n for n in (row[column] if len(row) > column else "").split(",") if n]


def _parse(path: str, data: bytes | None) -> Table:
    rows = tuple(
        tuple(line.split(":"))
        for line in (data or b"").decode("utf-8", "replace").splitlines()
        if line
    )
    return Table(path, rows)


def _render(table: Table) -> bytes:
    return "".join(":".join(r) + "\n" for r in table.rows).encode()


def read_table(ctx: HostContext, path: str) -> Table:
    """The database at host ``path`` under the root, as the pass read it (no lock); empty when it
    does not exist."""
    key = f"accounts:{path}"
    cached = ctx.cache.get(key)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    table = _parse(path, read_bytes(ctx.path(path)))
    ctx.cache[key] = table
    return table


def exists(ctx: HostContext, path: str) -> bool:
    """Whether the database at host ``path`` is there (a read of the host, recorded)."""
    return reads.kind(ctx.real(path)) is not None


def _forget(ctx: HostContext) -> None:
    """Drop the pass's tables: the resources after an edit read what it wrote."""
    for path in _LOCK_ORDER:
        ctx.cache.pop(f"accounts:{path}", None)


# --- one locked edit -----------------------------------------------------------------------------


@dataclass(slots=True)
class Edit:
    """The databases as read under the lock, and the tables to write when the edit ends."""

    read: dict[str, Table]
    # Each file's content under the lock (None: not there); shadow's holds hashes: not in a repr.
    old: dict[str, bytes | None] = field(repr=False)
    staged: dict[str, Table] = field(default_factory=dict)

    def table(self, path: str) -> Table:
        """The database as this edit leaves it so far."""
        return self.staged[path] if path in self.staged else self.read[path]

    def present(self, path: str) -> bool:
        """Whether the file was there under the lock (shadow and gshadow are never invented)."""
        return self.old[path] is not None

    def put(self, table: Table) -> None:
        """Stage ``table`` for writing; only a database this edit locked."""
        if table.path not in self.read:
            raise ValueError(f"{table.path} is not locked by this edit")
        self.staged[table.path] = table

    def commit(self, ctx: HostContext) -> None:
        """Write each changed table, in the order the module docstring explains."""
        for path in _WRITE_ORDER:
            table = self.staged.get(path)
            if table is not None and table.rows != self.read[path].rows:
                _write(ctx, table, self.old[path])


def _write(ctx: HostContext, table: Table, old: bytes | None) -> None:
    """``table`` over its file, atomically, the previous content first kept as ``<file>-`` (the
    backup commonio keeps: what an administrator restores from)."""
    mode = _SECRET.get(table.path)
    if old is not None:
        _write_file(ctx, f"{table.path}-", old, mode, follow_last=False)
    _write_file(ctx, table.path, _render(table), mode)


def _write_file(ctx: HostContext, host_path: str, data: bytes, mode: int | None, *, follow_last: bool = True) -> None:
    """``data`` over the file at ``host_path``, through the descriptor of its directory reached
    without following a link (``datum.providers.held``), as every write under the root."""
    real = ctx.real(host_path, follow_last=follow_last)
    with ctx.parent(real, host_path) as (fd, name):
        write_at(fd, name, data, mode=mode, host_path=host_path)


@contextmanager
def locked(ctx: HostContext, *paths: str) -> Iterator[Edit]:
    """One edit of the databases ``paths`` (all four by default) under shadow-utils' locks.

    Yields the tables read fresh under the locks; what is ``put`` is written when the block
    ends without an error (nothing is written otherwise), then the locks are let go.
    """
    wanted = [p for p in _LOCK_ORDER if p in (paths or _LOCK_ORDER)]
    held = _Held()
    try:
        _take(ctx, wanted, held)
        old = {path: read_bytes(ctx.path(path)) for path in wanted}
        edit = Edit({path: _parse(path, data) for path, data in old.items()}, old)
        yield edit
        edit.commit(ctx)
    finally:
        _forget(ctx)
        held.release()


# --- the locks -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Held:
    """The locks an edit holds: lckpwdf's descriptor and the ``<file>.lock`` links it made."""

    fd: int | None = None
    # Each lock file and the device and inode of what was linked there.
    links: list[tuple[str, tuple[int, int]]] = field(default_factory=list)

    def release(self) -> None:
        """Let go in the reverse order, as commonio does: the links, then lckpwdf."""
        while self.links:
            _unlink_if(*self.links.pop())
        if self.fd is not None:
            os.close(self.fd)  # closing it ends the fcntl lock, as ulckpwdf does
            self.fd = None


def _take(ctx: HostContext, paths: list[str], held: _Held) -> None:
    """lckpwdf, then each database's lock, within one ``LOCK_WAIT`` in all."""
    deadline = time.monotonic() + LOCK_WAIT
    held.fd = _lckpwdf(ctx.real(PWD_LOCK, follow_last=False), deadline)
    for path in paths:
        lock = ctx.real(f"{path}.lock", follow_last=False)
        held.links.append((lock, _lock_file(ctx, path, lock, deadline)))


def _lock_file(ctx: HostContext, path: str, lock: str, deadline: float) -> tuple[int, int]:
    """commonio's lock of the database ``path``, tried until ``deadline``: ``<file>.<pid>``
    made once, linked to ``lock`` at each try, removed after. Returns the lock's device and inode."""
    mine = ctx.real(f"{path}.{os.getpid()}", follow_last=False)
    _write_pid(mine)
    try:
        return _wait(lambda: _try_link(mine, lock), deadline, lock, lambda: _read_lock(lock)[0])
    finally:
        _unlink_quietly(mine)


def _wait(
    attempt: Callable[[], _T | None], deadline: float, lock: str, holder: Callable[[], int | None]
) -> _T:
    """``attempt()`` until it returns something; past ``deadline``, fail naming ``lock`` and
    ``holder()`` (its pid, or None when unknown)."""
    while True:
        got = attempt()
        if got is not None:
            return got
        if time.monotonic() >= deadline:
            pid = holder()
            by = f" by pid {pid}" if pid else ""
            raise ProviderError(
                f"{lock} is held{by}: waited {LOCK_WAIT:g} s {hostreasons.ACCOUNTS_LOCKED}"
            )
        time.sleep(_POLL)


def _lckpwdf(path: str, deadline: float) -> int:
    """glibc's lckpwdf on ``path``: opened as it opens it (O_NOFOLLOW added: a link there is
    refused), an fcntl write lock over the whole file. The descriptor holds it."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        fd = os.open(path, _CREATE, 0o600)
    except OSError as exc:
        raise ProviderError(f"cannot open {path}: {exc.strerror}") from exc
    try:
        _wait(lambda: _try_fcntl(fd), deadline, path, lambda: _fcntl_holder(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _try_fcntl(fd: int) -> bool | None:
    """One try at the write lock (F_SETLK, as lockf does it); None while another holds it."""
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return None
        raise
    return True


def _fcntl_holder(fd: int) -> int | None:
    """The pid holding the fcntl lock on ``fd`` (F_GETLK), for the message; None when unknown."""
    request = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0).ljust(_FLOCK_SIZE, b"\0")
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, request)
        kind, _whence, _start, _len, pid = _FLOCK.unpack_from(answer)
    except (OSError, struct.error):
        return None
    return pid if kind != fcntl.F_UNLCK and pid > 0 else None


def _try_link(mine: str, lock: str) -> tuple[int, int] | None:
    """One try at commonio's lock: ``mine`` (``<file>.<pid>``, our pid in it) linked to ``lock``.

    Taken when the link is made and ``mine`` then has exactly two names (commonio's check). A
    lock naming a pid that no longer runs is removed, as commonio removes it (only while it is
    still the file whose pid was read), and the link tried once more. Returns the lock's device
    and inode (released only while it is still ours), or None while another process holds it.
    """
    for _ in range(2):
        try:
            os.link(mine, lock)
        except FileExistsError:
            pid, ident = _read_lock(lock)
            if pid is None or ident is None or _runs(pid):
                return None  # held (or gone since: the next try takes it)
            _unlink_if(lock, ident)
            continue
        st = os.lstat(mine)
        if st.st_nlink == 2:
            return st.st_dev, st.st_ino
        _unlink_if(lock, (st.st_dev, st.st_ino))
        return None
    return None


def _write_pid(path: str) -> None:
    """``path`` holding our pid as commonio writes it (decimal, a NUL after), synced."""
    _unlink_quietly(path)  # one left by a process that had our pid before
    try:
        fd = os.open(path, _CREATE | os.O_EXCL, 0o600)
    except OSError as exc:
        raise ProviderError(f"cannot create {path}: {exc.strerror}") from exc
    try:
        os.write(fd, f"{os.getpid()}\0".encode())
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _read_lock(lock: str) -> tuple[int | None, tuple[int, int] | None]:
    """The pid a lock file names (None: none, as commonio refuses it) and the device and inode of
    the file read (None: it is gone)."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None, None
    try:
        st = os.fstat(fd)
        text = os.read(fd, 32).split(b"\0", 1)[0].strip()
    finally:
        os.close(fd)
    pid = int(text) if text.isdigit() and int(text) > 0 else None
    return pid, (st.st_dev, st.st_ino)


def _runs(pid: int) -> bool:
    """Whether a process ``pid`` exists (commonio's ``kill(pid, 0)``)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unlink_if(lock: str, ident: tuple[int, int]) -> None:
    """Remove ``lock`` if it is still the file we linked (never a lock another took since)."""
    try:
        st = os.lstat(lock)
    except FileNotFoundError:
        return
    if (st.st_dev, st.st_ino) == ident:
        _unlink_quietly(lock)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def named(ctx: HostContext, exc: reads.Untrusted) -> str:
    """A refused link's message with the uids it names named as the root's passwd names them
    (``uid 1001 (app)``); the numbers alone when the passwd cannot be read (it may be behind the very
    link refused)."""
    text = str(exc)
    try:
        users = read_table(ctx, PASSWD)
    except Exception:  # noqa: BLE001 - the number alone says enough
        return text
    for uid in dict.fromkeys(exc.uids):
        row = users.by_id(uid)
        if row is not None:
            text = text.replace(f"uid {uid}", f"uid {uid} ({row[0]})", 1)
    return text


# --- look-ups ------------------------------------------------------------------------------------


def id_in(table: Table, name: str, what: str) -> int:
    """The id of ``name`` (a ``what``: user, group) in ``table``; a number stands for itself."""
    if name.isdigit():
        return int(name)
    row = table.get(name)
    if row is None or len(row) < 3:
        raise ProviderError(f"no {what} {name!r} in {table.path}")
    return int(row[2])


def uid_of(ctx: HostContext, owner: str) -> int:
    return int(owner) if owner.isdigit() else id_in(read_table(ctx, PASSWD), owner, "user")


def gid_of(ctx: HostContext, group: str) -> int:
    return int(group) if group.isdigit() else id_in(read_table(ctx, GROUP), group, "group")


def owner_ids(
    ctx: HostContext, owner: str | None, group: str | None
) -> tuple[int | None, int | None]:
    """The numeric ids of an owner and group attribute (None where not managed)."""
    return (
        uid_of(ctx, owner) if owner is not None else None,
        gid_of(ctx, group) if group is not None else None,
    )


def next_id(used: set[int], system: bool) -> int:
    """The first free id in the range Debian's adduser uses."""
    lo, hi = (100, 999) if system else (1000, 59999)
    for candidate in range(lo, hi + 1):
        if candidate not in used:
            return candidate
    raise ProviderError("no free id left")

"""Locks: leases with an expiry, and session locks that die with the process holding them.

A *lease* (a row of ``locks``) has one holder at a time and an expiry, so a
crashed holder cannot wedge it forever. A *session lock* is released by the
kernel (``flock`` on a file beside a SQLite database) or by the PostgreSQL
server (a session-level advisory lock on a connection held for the pass) the
moment its process dies: SIGKILL included, no expiry to wait for. The
reconciler runner holds both; a lease whose holder is session-bound (see
``SESSION_HOLDER``) is stale as soon as its session lock can be taken.

A process that is alive but hung (stopped, stuck in a system call) keeps its
session lock forever: its lease's expiry is then the claim's timeout. Whoever
takes an expired lease (``take_expired``, one winner) may end the other's
session lock (``SessionLock.break_held``); a holder that is not hung renews
its lease well before it expires (``renew``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Protocol

import sqlalchemy as sa

from datum.core.findings import ErrorCode, Problem
from datum.store.engine import Store
from datum.store.schema import locks as t

# Holders written by a process that also holds the name's session lock.
SESSION_HOLDER = "session:"


def try_acquire(
    store: Store,
    name: str,
    holder: str,
    now: datetime,
    ttl: timedelta,
    *,
    takeover: Callable[[str], bool] | None = None,
) -> bool:
    """Take the lease ``name`` for ``holder`` unless someone else holds an unexpired one.

    ``takeover(other)`` says that another holder's unexpired lease is proven
    stale (its process is gone) and may be taken anyway.
    """
    with store.begin() as conn:
        row = conn.execute(sa.select(t.c.holder).where(t.c.name == name)).first()
        if row is None:
            try:
                with conn.begin_nested():
                    conn.execute(
                        sa.insert(t).values(name=name, holder=holder, expires_at=now + ttl)
                    )
                return True
            except sa.exc.IntegrityError:
                row = conn.execute(sa.select(t.c.holder).where(t.c.name == name)).first()
        free = [t.c.holder.is_(None), t.c.expires_at < now, t.c.holder == holder]
        other = row[0] if row is not None else None
        if other is not None and takeover is not None and takeover(other):
            free.append(t.c.holder == other)
        taken = conn.execute(
            sa.update(t)
            .where(t.c.name == name, sa.or_(*free))
            .values(holder=holder, expires_at=now + ttl)
        )
        return taken.rowcount == 1


def take_expired(conn: sa.Connection, name: str, holder: str, now: datetime, ttl: timedelta) -> bool:
    """In ``conn``'s transaction, take the lease ``name`` only from another holder whose lease expired by ``now``.

    A free lease is not taken here: its session lock's holder may be about to take it.
    """
    taken = conn.execute(
        sa.update(t)
        .where(t.c.name == name, t.c.holder.is_not(None), t.c.holder != holder, t.c.expires_at < now)
        .values(holder=holder, expires_at=now + ttl)
    )
    return taken.rowcount == 1


def renew(store: Store, name: str, holder: str, now: datetime, ttl: timedelta) -> bool:
    """Move the expiry of ``holder``'s lease to ``now + ttl``; False when it is no longer ``holder``'s."""
    with store.begin() as conn:
        renewed = conn.execute(
            sa.update(t).where(t.c.name == name, t.c.holder == holder).values(expires_at=now + ttl)
        )
        return renewed.rowcount == 1


def release(store: Store, name: str, holder: str) -> None:
    """Give the lease back, if ``holder`` still holds it."""
    with store.begin() as conn:
        conn.execute(
            sa.update(t)
            .where(t.c.name == name, t.c.holder == holder)
            .values(holder=None, expires_at=None)
        )


class SessionLock(Protocol):
    """A lock released by the kernel or the database server when its process dies."""

    # Whether a dead holder really releases it (False: an in-memory store, nothing to share).
    dies_with_process: bool

    def try_acquire(self) -> bool:
        """Take it without waiting; False when another process (or Store) holds it."""

    def held(self) -> bool:
        """Whether this process still holds it (the lock file was not replaced, the session lives)."""

    def release(self) -> None:
        """Give it back; harmless when it is not held."""

    def break_held(self) -> None:
        """End another holder's hold (its claim timed out): it finds ``held()`` False from now on."""


class _FileLock:
    """``flock`` on a file beside the SQLite database: one holder per open file, across processes."""

    dies_with_process = True

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        try:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except PermissionError:
                # Another user's file (``datum serve`` as a service): flock needs no write access.
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise Problem.one(
                ErrorCode.UNAVAILABLE, f"cannot open the lock file {self.path}: {exc.strerror}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def held(self) -> bool:
        if self._fd is None:
            return False
        try:
            now = os.stat(self.path)
        except OSError:
            return False  # removed: another process may lock a new file of that name
        mine = os.fstat(self._fd)
        return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor drops the flock

    def break_held(self) -> None:
        # The holder's descriptor stays locked on a file nobody can open again: the next
        # try_acquire makes a new one, and the holder's held() sees another file.
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


_KEEPALIVE = {"tcp_keepalives_idle": 30, "tcp_keepalives_interval": 10, "tcp_keepalives_count": 3}


class _AdvisoryLock:
    """A session-level ``pg_try_advisory_lock`` on a connection of its own, held until release."""

    dies_with_process = True

    def __init__(self, store: Store, name: str) -> None:
        digest = hashlib.blake2b(f"datum:{name}".encode(), digest_size=8).digest()
        self.key = int.from_bytes(digest, "big", signed=True)
        self.store = store
        self._conn: sa.Connection | None = None

    def try_acquire(self) -> bool:
        conn = self.store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            # A holder whose host vanished (no FIN) is noticed in about a minute, not the
            # server's default two hours of TCP keepalive; ignored over a Unix socket.
            for name, value in _KEEPALIVE.items():
                conn.execute(sa.text(f"SET {name} = {value}"))
            got = conn.execute(sa.select(sa.func.pg_try_advisory_lock(self.key))).scalar()
        except BaseException:
            conn.invalidate()
            conn.close()
            raise
        if not got:
            conn.close()
            return False
        self._conn = conn
        return True

    def held(self) -> bool:
        if self._conn is None:
            return False
        try:
            self._conn.execute(sa.select(1))
        except sa.exc.SQLAlchemyError:
            return False  # the session ended, and the server released the lock with it
        return True

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        # The session ends with the connection: the server drops the lock even if
        # the unlock below cannot be sent, and no pooled connection keeps it.
        try:
            conn.execute(sa.select(sa.func.pg_advisory_unlock(self.key)))
        except sa.exc.SQLAlchemyError:
            pass
        finally:
            conn.invalidate()
            conn.close()


    def break_held(self) -> None:
        hi, lo = (self.key & 0xFFFFFFFFFFFFFFFF) >> 32, self.key & 0xFFFFFFFF
        with self.store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            # pg_locks shows a bigint key as its high and low halves; waits up to 10 s for each end.
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid, 10000) FROM pg_locks WHERE locktype = 'advisory'"
                    " AND granted AND classid = :hi AND objid = :lo AND objsubid = 1"
                    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                    " AND pid <> pg_backend_pid()"
                ),
                {"hi": hi, "lo": lo},
            )


class _ProcessOnly:
    """An in-memory database is private to this process: the runner's own locks suffice."""

    dies_with_process = False

    def try_acquire(self) -> bool:
        return True

    def held(self) -> bool:
        return True

    def release(self) -> None:
        return None

    def break_held(self) -> None:
        return None


def session_lock(store: Store, name: str) -> SessionLock:
    """The session lock ``name`` of ``store``'s database."""
    if store.dialect == "postgresql":
        return _AdvisoryLock(store, name)
    database = store.engine.url.database
    if store.dialect == "sqlite" and database and database != ":memory:":
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        # The real path: two processes naming the file through different symlinks share the lock.
        return _FileLock(f"{os.path.realpath(database)}.{safe}.lock")
    return _ProcessOnly()

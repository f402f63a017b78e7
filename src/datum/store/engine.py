"""Opening a store: the engine, per-dialect settings, and creating the schema.

Every database error that leaves a ``Store`` block (``begin``, ``connect``,
``ensure``) leaves it as a ``StoreFault``: the contract's ``UNAVAILABLE``
finding naming the store (never its password) and the cause the database gave
(locked, read-only, disk full, file gone), never the SQL statement. A SQLite
store also refuses writes once its file was deleted or replaced under the
process: the open connections would otherwise write to a file nobody can see.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from pathlib import Path
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from datum.core.findings import ErrorCode, Finding, Problem
from datum.store import audit
from datum.store.migrate import CORE, Branch, Migrated, exclusive, migrate

DEFAULT_LOCK_WAIT = timedelta(seconds=10)


class StoreFault(Problem):
    """The store could not do what was asked: ``UNAVAILABLE``, naming the store and the cause."""


def _cause(exc: BaseException) -> str:
    """What the database said, without the statement SQLAlchemy appends."""
    orig = getattr(exc, "orig", None)
    if orig is not None:
        exc = orig
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.split("\n[SQL:", 1)[0].strip()


def _disk_full(path: str | None) -> bool:
    try:
        return path is not None and os.statvfs(os.path.dirname(path) or ".").f_bavail == 0
    except OSError:
        return False


def fault(
    name: str | None, exc: BaseException, lock_wait: float | None = None, path: str | None = None
) -> StoreFault:
    """``exc`` (a DBAPI or SQLAlchemy error) as the finding an operator can act on; ``name`` is the store's.

    SQLite reports a full disk under its WAL as ``disk I/O error``: the free space of
    ``path``'s file system tells the real cause.
    """
    cause = _cause(exc)
    name = name or "in use"
    if _disk_full(path) and "full" not in cause:
        cause = f"{cause}: no space left on device"
    low = cause.lower()
    if "locked" in low or "busy" in low or "lock timeout" in low:
        waited = f" after waiting {lock_wait:g}s" if lock_wait is not None else ""
        message = f"the store {name} is locked by another process; gave up{waited} ({cause})"
    elif "readonly" in low or "read-only" in low or "read only" in low:
        message = f"the store {name} is read-only: {cause}"
    elif "full" in low or "no space" in low:
        message = f"the store {name} cannot grow, the disk is full: {cause}"
    else:
        message = f"the store {name} failed: {cause}"
    return StoreFault([Finding(ErrorCode.UNAVAILABLE, message)])


_FAULTS: tuple[type[BaseException], ...] = (sa.exc.DBAPIError, sa.exc.OperationalError, sqlite3.Error)


def _is_fault(exc: BaseException) -> bool:
    # A constraint violation is the caller's to handle (an insert race); everything else is the store's.
    return isinstance(exc, _FAULTS) and not isinstance(exc, sa.exc.IntegrityError | sqlite3.IntegrityError)


def _identity(path: str | None) -> tuple[int, int] | None:
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


_WRITERS: dict[str, threading.Lock] = {}  # per SQLite file: the intake's writes in this process, one at a time
_WRITERS_LOCK = threading.Lock()


def _writers(path: str) -> threading.Lock:
    with _WRITERS_LOCK:
        return _WRITERS.setdefault(os.path.realpath(path), threading.Lock())


class Store:
    """A connection pool to one store, SQLite or PostgreSQL."""

    def __init__(
        self,
        engine: Engine,
        *,
        path: str | None = None,
        lock_wait: timedelta = DEFAULT_LOCK_WAIT,
        migrated: Migrated | None = None,
    ) -> None:
        self.engine = engine
        # What opening the store did to its schema (``datum store migrate`` reports it).
        self.migrated = migrated
        self.name = engine.url.render_as_string(hide_password=True)
        self.lock_wait = lock_wait
        self._path = path
        self._identity = _identity(path)
        self._writer = _writers(path) if path is not None and engine.dialect.name == "sqlite" else None
        self._ensured: set[int] = set()
        self._migrated: set[str] = set()
        # Makes another engine on the same database with a pool of the given size and overflow (``own_pool``).
        self._another: Callable[[int, int], Engine] | None = None

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def fault(self, exc: BaseException) -> StoreFault:
        """``exc`` as this store's ``UNAVAILABLE`` finding."""
        return fault(self.name, exc, self.lock_wait.total_seconds(), self._path)

    def check_file(self) -> None:
        """Refuse when the SQLite file this store opened was deleted or replaced since."""
        if self._identity is not None and _identity(self._path) != self._identity:
            raise StoreFault.one(
                ErrorCode.UNAVAILABLE,
                f"the store {self.name} is gone: its file {self._path} was deleted or replaced "
                "while this process had it open; restart to use a new one",
            )

    def ensure(self, metadata: sa.MetaData) -> None:
        """Create ``metadata``'s tables if they do not exist (once per process).

        Under the migrations' lock: replicas starting together never race to create one table.
        """
        if id(metadata) in self._ensured:
            return
        with self.faults(), exclusive(self.engine) as conn:
            metadata.create_all(conn, checkfirst=True)
        self._ensured.add(id(metadata))

    def require(self, branch: Branch) -> None:
        """Bring a plugin's migration branch to its heads (once per process): its tables exist after."""
        if branch.version_table in self._migrated:
            return
        with self.faults():
            migrate(self.engine, [branch])
        self._migrated.add(branch.version_table)

    @contextmanager
    def faults(self) -> Iterator[None]:
        """Database errors raised in the block leave it as this store's ``StoreFault``."""
        try:
            yield
        except Exception as exc:
            if _is_fault(exc):
                raise self.fault(exc) from exc
            raise

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A transaction; committed when the block ends, rolled back on an exception.

        The first of a request's transactions that commits carries its audit row (``datum.store.audit.due``).
        """
        self.check_file()
        with self.faults():
            with self.engine.begin() as conn:
                try:
                    yield conn
                    carried = audit.due(conn)
                finally:
                    audit.forget(conn)
            if carried is not None:
                carried.written = True

    @contextmanager
    def one_writer(self) -> Iterator[None]:
        """The block is this process's only one writing a SQLite file (others wait their turn here, at most
        ``lock_wait``); nothing on PostgreSQL, whose rows are locked one by one.

        For a burst of small transactions from many threads at once (a wave of a rollout reporting: hundreds of
        pass reports in a second). SQLite has one writer at a time, and a connection refused the file's lock
        sleeps in SQLite's busy handler (1, 2, 5, 10 ... 100 ms) before it asks again, however soon the lock
        was freed: fifteen threads asking at once spend most of their time asleep with the file free. A lock
        in this process wakes the next writer as the last one commits. Other processes (the CLI, another
        server) still wait in the busy handler, as before."""
        if self._writer is None:
            yield
            return
        if not self._writer.acquire(timeout=self.lock_wait.total_seconds()):
            raise self.fault(sqlite3.OperationalError("database is locked (by this process's other writers)"))
        try:
            yield
        finally:
            self._writer.release()

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A connection for reads."""
        with self.faults(), self.engine.connect() as conn:
            yield conn

    def ping(self) -> None:
        """Ask the store one trivial question: ``StoreFault`` when it cannot answer or its file is gone."""
        self.check_file()
        with self.connect() as conn:
            conn.execute(sa.text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()

    def own_pool(self, size: int, overflow: int = 0) -> Store:
        """This store with connections of its own: another engine on the same database, with a pool of
        ``size`` kept connections (opened as needed) and ``overflow`` more for a burst.

        What the server's control loop (the scheduler's ticks, the retention) runs on, so that requests,
        however many, never take the connections a tick needs. A store that cannot have a second engine
        (SQLite in memory: another engine is another database) is itself.
        """
        if self._another is None:
            return self
        other = Store(
            self._another(size, overflow), path=self._path, lock_wait=self.lock_wait, migrated=self.migrated
        )
        other._identity = self._identity  # the file this process opened, not the one there now
        other._ensured = self._ensured
        other._migrated = self._migrated
        return other


def _sqlite_pragmas(lock_wait: timedelta):  # type: ignore[no-untyped-def]
    busy_ms = max(1, int(lock_wait.total_seconds() * 1000))

    def pragmas(dbapi_conn: object, _record: object) -> None:
        cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
        cur.execute(f"PRAGMA busy_timeout={busy_ms}")
        _wal(cur, busy_ms)
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        # A REPLACE that removes a row fires its delete triggers only with this on: the per-status
        # counts (datum.store.status_counts) would otherwise count the replaced row twice.
        cur.execute("PRAGMA recursive_triggers=ON")
        cur.close()

    return pragmas


def _wal(cur: sqlite3.Cursor, busy_ms: int) -> None:
    """The file in WAL mode: switched only when it is not (the switch needs the file to itself, and SQLite may
    refuse it at once, without its busy wait, while another process migrates it), retried until ``busy_ms``."""
    import time

    deadline = time.monotonic() + busy_ms / 1000
    while True:
        try:
            if str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


class _NeverRecreate:
    """Once the store is open, new connections open its file read-write only: a file deleted
    under a running process is an error (``unable to open database file``), never a new empty
    store in its place."""

    def __init__(self, path: str) -> None:
        self.uri = f"file:{quote(path)}?mode=rw"
        self.opened = False

    def __call__(self, _dialect: object, _record: object, cargs: list[object], cparams: dict[str, object]) -> None:
        if self.opened and cargs:
            cargs[0] = self.uri
            cparams["uri"] = True


# The backends and DBAPI drivers Datum ships with; anything else is refused up front
# (a missing driver module is an import error deep inside SQLAlchemy otherwise).
_DRIVERS = frozenset(
    {"sqlite", "sqlite+pysqlite", "postgresql", "postgres", "postgresql+psycopg"}
)


POOL_SIZE = 40  # PostgreSQL connections a process keeps (opened as needed): anyio's worker threads
POOL_OVERFLOW = 10  # and a few more, opened and closed, for a burst past them


def open_store(
    url: str, *, lock_wait: timedelta | None = None, branches: Iterable[Branch] = ()
) -> Store:
    """Open the store at ``url`` (``sqlite:///path`` or ``postgresql://...``) and create its schema.

    The framework's tables are migrated, then every plugin branch in ``branches``.

    ``lock_wait`` is how long a statement waits for a SQLite store another
    process holds locked before the command gives up (``UNAVAILABLE``, exit 69).
    """
    wait = lock_wait or DEFAULT_LOCK_WAIT
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError) as exc:
        shown = url.split("://", 1)[0] + "://..." if "://" in url else "(not a URL)"
        raise Problem.one(ErrorCode.INVALID_INPUT, f"store URL {shown} is not a database URL") from exc
    if parsed.drivername not in _DRIVERS:
        raise Problem.one(
            ErrorCode.INVALID_INPUT,
            f"store {parsed.drivername!r} is not supported: use sqlite:/// or postgresql://",
        )
    if "\x00" in (parsed.database or ""):
        raise Problem.one(ErrorCode.INVALID_INPUT, "the store's database name holds a NUL byte")
    path: str | None = None
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:" and not database.startswith("file:"):
            folder = Path(database).expanduser().parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise Problem.one(
                    ErrorCode.UNAVAILABLE, f"cannot create the store's folder {folder}: {exc.strerror}"
                ) from exc
            path = str(Path(database).expanduser())
    elif parsed.drivername in ("postgresql", "postgres"):  # PostgreSQL: the only other backend _DRIVERS lets through
        parsed = parsed.set(drivername="postgresql+psycopg")
    never_recreate = _NeverRecreate(path) if path is not None else None
    engine = _engine(parsed, wait, never_recreate)
    shown = parsed.render_as_string(hide_password=True)
    branches = [CORE, *branches]
    try:
        migrated = migrate(engine, branches)
    except Exception as exc:
        if _is_fault(exc) or isinstance(exc, sa.exc.SQLAlchemyError):
            engine.dispose()
            raise fault(shown, exc, wait.total_seconds(), path) from exc
        raise
    if never_recreate is not None:
        never_recreate.opened = True
    store = Store(engine, path=path, lock_wait=wait, migrated=migrated)
    store._migrated.update(b.version_table for b in branches)
    if parsed.get_backend_name() != "sqlite" or path is not None:  # not an in-memory SQLite: another engine can be had
        store._another = partial(_engine, parsed, wait, never_recreate)
    return store


# psycopg turns a statement's %(name)s placeholders into $n on every execute, and keeps what it made (an LRU of 128
# statements) only for a statement of at most psycopg._queries.MAX_CACHED_STATEMENT_LENGTH characters (4,096). The
# intake's one statement on PostgreSQL (datum.store.hosts: the host row, its history, events, the lease and the
# audit row as CTEs) is 4.7 KB: parsed afresh for every report, 0.3-0.4 ms of the server's 2 ms a report (issue 37's
# audit row pushed it past the bound). The bound is raised to this for the process; the test that the intake's
# statement is taken from the cache is tests/api/test_audit_log.py's.
CACHED_STATEMENT = 16384


def _statements_cached() -> None:
    try:
        from psycopg import _queries
    except ImportError:  # pragma: no cover - another driver: nothing of psycopg's to set
        return
    if getattr(_queries, "MAX_CACHED_STATEMENT_LENGTH", CACHED_STATEMENT) < CACHED_STATEMENT:
        _queries.MAX_CACHED_STATEMENT_LENGTH = CACHED_STATEMENT


def _engine(
    parsed: sa.URL, wait: timedelta, never_recreate: _NeverRecreate | None, size: int | None = None, overflow: int = 0
) -> Engine:
    """An engine on the store ``parsed`` names; ``size`` and ``overflow`` its pool's (None: the defaults below)."""
    if parsed.get_backend_name() == "sqlite":
        pool = {} if size is None else {"pool_size": size, "max_overflow": overflow}
        engine = sa.create_engine(parsed, connect_args={"timeout": wait.total_seconds()}, **pool)
        sa.event.listen(engine, "after_cursor_execute", audit.wrote)
        sa.event.listen(engine, "connect", _sqlite_pragmas(wait))
        if never_recreate is not None:
            sa.event.listen(engine, "do_connect", never_recreate)
        return engine
    # A row or table another session holds is waited for lock_wait, a server that does not answer
    # about as long: then the statement fails (UNAVAILABLE) rather than hang the command.
    _statements_cached()
    wait_ms = max(1, int(wait.total_seconds() * 1000))
    connect_args = {
        "options": f"-c lock_timeout={wait_ms}",
        "connect_timeout": max(2, round(wait.total_seconds())),
    }
    # A server's worker threads (40) each may hold a connection: with SQLAlchemy's default pool of 5
    # (+10 overflow) every request past the fifth opened a new PostgreSQL connection and closed it after
    # (a backend forked per report under load). Connections are opened on demand, kept once opened.
    engine = sa.create_engine(
        parsed, pool_pre_ping=True, pool_size=POOL_SIZE if size is None else size,
        max_overflow=POOL_OVERFLOW if size is None else overflow, connect_args=connect_args,
    )
    sa.event.listen(engine, "after_cursor_execute", audit.wrote)  # which transaction is a request's change
    return engine

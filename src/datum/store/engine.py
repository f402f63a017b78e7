"""Opening a store: the engine, per-dialect settings, and creating the schema."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from datum.core.findings import Problem


class Store:
    """A connection pool to one store, SQLite or PostgreSQL."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._ensured: set[int] = set()

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def ensure(self, metadata: sa.MetaData) -> None:
        """Create ``metadata``'s tables if they do not exist (once per process)."""
        if id(metadata) in self._ensured:
            return
        metadata.create_all(self.engine, checkfirst=True)
        self._ensured.add(id(metadata))

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A transaction; committed when the block ends, rolled back on an exception."""
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A connection for reads."""
        with self.engine.connect() as conn:
            yield conn

    def dispose(self) -> None:
        self.engine.dispose()


def _sqlite_pragmas(dbapi_conn: object, _record: object) -> None:
    cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def open_store(url: str) -> Store:
    """Open the store at ``url`` (``sqlite:///path`` or ``postgresql://...``) and create its schema."""
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError) as exc:
        shown = url.split("://", 1)[0] + "://..." if "://" in url else "(not a URL)"
        raise Problem.one("INVALID_INPUT", f"store URL {shown} is not a database URL") from exc
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        database = parsed.database
        if database and database != ":memory:":
            folder = Path(database).expanduser().parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise Problem.one(
                    "UNAVAILABLE", f"cannot create the store's folder {folder}: {exc.strerror}"
                ) from exc
        engine = sa.create_engine(parsed)
        sa.event.listen(engine, "connect", _sqlite_pragmas)
    elif backend in ("postgresql", "postgres"):
        if parsed.drivername in ("postgresql", "postgres"):
            parsed = parsed.set(drivername="postgresql+psycopg")
        engine = sa.create_engine(parsed, pool_pre_ping=True)
    else:
        raise Problem.one(
            "INVALID_INPUT", f"store {backend!r} is not supported: use sqlite:/// or postgresql://"
        )
    store = Store(engine)
    from datum.store.migrate import migrate

    try:
        migrate(engine)
    except sa.exc.SQLAlchemyError as exc:
        raise Problem.one(
            "UNAVAILABLE",
            f"cannot open the store at {parsed.render_as_string(hide_password=True)}: {exc.orig or exc}",
        ) from exc
    return store

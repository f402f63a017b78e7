"""Fresh stores for tests copied from one migrated template, not migrated again each time.

Every store a test opens is new, and Alembic's 29 migrations took 1.6-2.4 s on SQLite and 1.5-9.5 s on
PostgreSQL per store (2026-12-07, 2 cores at load 11-15): every store paid again for the same schema. Each test process now migrates one template per backend once, and a new store is that template:

- PostgreSQL: ``CREATE DATABASE ... TEMPLATE`` (``clone_pg``; WAL_LOG, 0.25-0.45 s, where FILE_COPY
  checkpoints, 1.1-1.9 s), for the databases the fixtures make;
- SQLite: an empty file the code under test opens in this process gets the template's pages through
  SQLite's backup API (0.15-0.18 s, the open included) (``migrate_from_template``, wrapped around ``datum.store.migrate.migrate``).

Nothing else changes: the copy is the migrated schema byte for byte (triggers, partitions and the audit
chain's anchor rows included), and ``migrate`` still answers ``Migrated(before=nothing, after=heads)``
for a store it found empty, as the real one does. Stores opened by a child process (``datum serve``)
are migrated for real. A test that needs an empty database (the migrations' own tests) is marked
``empty_store``: its fixtures make one, and ``migrate`` runs Alembic for it.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

_LOCK = threading.Lock()
_SQLITE: list[Path] = []  # the template's file, made by the first store of this process
_PG: list[str] = []  # the template database's name
_FRESH: set[str] = set()  # PostgreSQL databases cloned and not yet opened: they read as migrated now
_BUILDING = threading.local()  # set while this thread builds the SQLite template: the real migrate runs


def sqlite_template(folder: Path) -> Path:
    """The migrated template's file (made once in ``folder``, by the real ``migrate``)."""
    with _LOCK:
        if not _SQLITE:
            from datum.store.engine import open_store

            path = folder / f"template-{uuid.uuid4().hex[:8]}.db"
            _BUILDING.on = True
            try:
                open_store(f"sqlite:///{path}").dispose()
            finally:
                _BUILDING.on = False
            _SQLITE.append(path)
        return _SQLITE[0]


def pg_template(admin: sa.Engine, admin_url: str) -> str:
    """The migrated template database's name (made once per test process)."""
    with _LOCK:
        if not _PG:
            name = f"datum_template_{uuid.uuid4().hex[:12]}"
            with admin.connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
            from datum.store.engine import open_store

            store = open_store(sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False))
            store.dispose()  # no connection may stay on a template while it is copied
            _PG.append(name)
        return _PG[0]


def clone_pg(admin: sa.Engine, admin_url: str, name: str) -> None:
    """Make the database ``name`` as a copy of the migrated template."""
    template = pg_template(admin, admin_url)
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    _FRESH.add(name)


def drop_pg_template(admin: sa.Engine) -> None:
    with _LOCK:
        for name in _PG:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        _PG.clear()


def migrate_from_template(real: Callable[..., object], folder: Path) -> Callable[..., object]:
    """``datum.store.migrate.migrate`` for tests: an empty SQLite file gets the template's pages, a cloned
    PostgreSQL database opened the first time reads as just migrated; anything else is ``real``'s."""
    from datum.store.migrate import CORE, HEADS, Migrated

    def migrate(engine: sa.Engine, branches=(CORE,)):  # type: ignore[no-untyped-def]
        wanted = list(branches)
        if wanted != [CORE]:
            return real(engine, branches)
        database = engine.url.database or ""
        if engine.dialect.name == "postgresql":
            if database in _FRESH:
                _FRESH.discard(database)
                return Migrated(frozenset(), HEADS)
            return real(engine, branches)
        if getattr(_BUILDING, "on", False) or not database or database == ":memory:" or database.startswith("file:"):
            return real(engine, branches)
        template = sqlite_template(folder)
        with _LOCK:  # two threads of this process opening one new store: one copy, the other finds it there
            with engine.connect() as conn:
                empty = not sa.inspect(conn).get_table_names()
            if not empty:
                return real(engine, branches)
            raw = engine.raw_connection()
            try:
                source = sqlite3.connect(template)
                try:
                    source.backup(raw.driver_connection)  # type: ignore[arg-type]
                finally:
                    source.close()
            finally:
                raw.close()
        return Migrated(frozenset(), HEADS)

    return migrate

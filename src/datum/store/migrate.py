"""Bring a store's framework tables to the current schema with Alembic, once, whoever gets there first.

Opening a store that is already current costs one small query; Alembic is
imported only when there is something to do, so ``datum`` starts fast.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

# The newest revision in migrations/versions; a test checks they agree.
HEAD = "0006"
BASELINE = "0001"
MIGRATIONS = Path(__file__).parent / "migrations"


def current_revision(conn: Connection) -> str | None:
    """The store's Alembic revision, or None for a store Alembic has never touched."""
    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


@contextmanager
def _exclusive(engine: Engine, conn: Connection) -> Iterator[None]:
    """Serialise migrations between processes: an advisory lock on PostgreSQL, a file lock on SQLite."""
    if engine.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('datum-migrate'))"))
        yield
        return
    database = engine.url.database
    if not database or database == ":memory:":
        yield
        return
    with open(f"{database}.migrate-lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def migrate(engine: Engine) -> None:
    """Upgrade the framework tables to ``HEAD``."""
    with engine.connect() as probe:
        if current_revision(probe) == HEAD:
            return
    from alembic import command
    from alembic.config import Config

    with engine.begin() as conn, _exclusive(engine, conn):
        revision = current_revision(conn)
        if revision == HEAD:
            return
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        if revision is None and sa.inspect(conn).has_table("item_memory"):
            # Made by create_all before migrations existed: it is the baseline.
            command.stamp(cfg, BASELINE)
        command.upgrade(cfg, "head")

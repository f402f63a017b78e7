"""Bring a store's tables to the current schema with Alembic, once, whoever gets there first.

Any number of processes may open or migrate one store at once (``datum serve``
replicas starting together, ``datum store migrate`` run from several hosts):
the upgrade runs under a lock that dies with its holder (a transaction-level
PostgreSQL advisory lock, ``flock`` beside a SQLite file), and whoever gets it
second finds the store current and does nothing. The store is current when its
revisions are exactly the migration scripts' heads, however many branches
there are. Opening a store that is already current costs one small query;
Alembic is imported only when there is something to do, so ``datum`` starts
fast.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

# The newest revision in migrations/versions; a test checks they agree.
HEAD = "host_summaries"
# Every head the scripts have (one per Alembic branch): a store at exactly these is current
# without importing Alembic. Under the lock, the scripts' own heads decide.
HEADS = frozenset({HEAD})
BASELINE = "0001"
MIGRATIONS = Path(__file__).parent / "migrations"


@dataclass(frozen=True)
class Migrated:
    """What one ``migrate`` found and left: the store's revisions before and after."""

    before: frozenset[str]
    after: frozenset[str]

    @property
    def upgraded(self) -> bool:
        return self.before != self.after


def current_revisions(conn: Connection) -> frozenset[str]:
    """The store's Alembic revisions (one per branch); empty for a store Alembic has never touched."""
    if not sa.inspect(conn).has_table("alembic_version"):
        return frozenset()
    return frozenset(conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars())


@contextmanager
def _file_lock(database: str | None) -> Iterator[None]:
    """``flock`` on ``DATABASE.migrate-lock`` for the block (nothing for an in-memory database)."""
    if not database or database == ":memory:":
        yield
        return
    with open(f"{database}.migrate-lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def exclusive(engine: Engine) -> Iterator[Connection]:
    """A transaction that changes the schema while no other process does: held until it committed.

    PostgreSQL: an advisory lock of the transaction, released at commit,
    rollback or the end of the session. SQLite: ``flock`` on
    ``DATABASE.migrate-lock`` taken before the transaction begins and released
    after it ends (or when the process dies), so the next holder reads what
    this one committed.
    """
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('datum-migrate'))"))
            yield conn
        return
    with _file_lock(engine.url.database), engine.begin() as conn:
        yield conn


def migrate(engine: Engine) -> Migrated:
    """Upgrade the store to every head of the migration scripts; nothing when it is there already."""
    with engine.connect() as probe:
        before = current_revisions(probe)
    if before == HEADS:
        return Migrated(before, before)
    from alembic import command
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    heads = frozenset(ScriptDirectory.from_config(cfg).get_heads())  # whatever branches there are
    with exclusive(engine) as conn:
        before = current_revisions(conn)  # another process may have upgraded it while we waited
        if before == heads:
            return Migrated(before, before)
        cfg.attributes["connection"] = conn
        if not before and sa.inspect(conn).has_table("item_memory"):
            # Made by create_all before migrations existed: it is the baseline.
            command.stamp(cfg, BASELINE)
        command.upgrade(cfg, "heads")
        return Migrated(before, current_revisions(conn))

"""A store left at an older migration, to see what upgrading it does to the rows already there."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection

from datum.store.migrate import MIGRATIONS


@contextmanager
def at_revision(store_url: str, revision: str) -> Iterator[Connection]:
    """A transaction on the store at ``store_url`` migrated up to ``revision`` only (not HEAD)."""
    engine = sa.create_engine(store_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.begin() as conn:
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
            yield conn
    finally:
        engine.dispose()

"""Each revision's files in the store (``revision_files``), written once by whichever replica records it first."""

from __future__ import annotations

import sqlalchemy as sa

from datum.store.engine import Store
from datum.store.schema import revision_files
from datum.store.types import insert_for


def keep(store: Store, revision: str, blob: bytes) -> None:
    """Keep ``blob`` as ``revision``'s files unless a snapshot of it is already kept (any replica may race)."""
    insert = insert_for(store.dialect)
    with store.begin() as conn:
        stmt = insert(revision_files).values(revision=revision, content=blob, size=len(blob))
        conn.execute(stmt.on_conflict_do_nothing(index_elements=[revision_files.c.revision]))


def kept(store: Store, revision: str) -> bool:
    with store.connect() as conn:
        found = conn.execute(sa.select(revision_files.c.size).where(revision_files.c.revision == revision))
        return found.first() is not None


def load(store: Store, revision: str) -> bytes | None:
    """``revision``'s files as ``datum.fleet.rollouts.snapshot.capture`` made them, or None when none are kept."""
    with store.connect() as conn:
        found = conn.execute(sa.select(revision_files.c.content).where(revision_files.c.revision == revision))
        row = found.first()
    return None if row is None else bytes(row[0])

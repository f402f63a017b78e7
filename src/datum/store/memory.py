"""Loading and saving per-item memory: rows exist only for items that diverged."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from datum.core.memory import ItemMemory
from datum.store.schema import item_memory as t


def load_memory(conn: Connection, reconciler: str, kind: str) -> dict[str, ItemMemory]:
    """The memory the last executed pass left for one reconciler's kind."""
    rows = conn.execute(
        sa.select(t).where(t.c.reconciler == reconciler, t.c.kind == kind)
    ).mappings()
    return {r["item_id"]: _memory(r) for r in rows}


def _memory(r: Mapping[str, Any]) -> ItemMemory:
    direction, settling, gone = ItemMemory.parse_direction(r["direction"])
    return ItemMemory(
        direction=direction,
        streak=r["streak"],
        failures=r["failures"],
        last_err=r["last_err"],
        retry_after_passes=r["retry_after_passes"],
        settling=settling,
        gone=gone,
        permanent=r.get("permanent"),
    )


def save_memory(
    conn: Connection, reconciler: str, kind: str, memory: Mapping[str, ItemMemory]
) -> None:
    """Replace one kind's memory with ``memory``: converged items are forgotten."""
    conn.execute(sa.delete(t).where(t.c.reconciler == reconciler, t.c.kind == kind))
    if memory:
        conn.execute(
            sa.insert(t),
            [
                {
                    "reconciler": reconciler,
                    "kind": kind,
                    "item_id": key,
                    "direction": m.stored_direction,
                    "streak": m.streak,
                    "failures": m.failures,
                    "last_err": m.last_err,
                    "retry_after_passes": m.retry_after_passes,
                    "permanent": m.permanent,
                }
                for key, m in memory.items()
            ],
        )


def break_streaks(conn: Connection, reconciler: str, observed: Collection[str]) -> None:
    """A pass that could not observe a kind breaks its items' confirmation streaks.

    Streaks count *consecutive* executed passes that saw the item diverged. A
    pass that failed before it read a kind saw nothing, so the next read must
    not complete a streak begun before the outage (and finalise on one read
    after it). Failures and backoff are kept: they are about applies, not reads.
    """
    query = sa.update(t).where(t.c.reconciler == reconciler)
    if observed:
        query = query.where(t.c.kind.not_in(list(observed)))
    conn.execute(query.values(streak=0))

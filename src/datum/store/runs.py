"""Each reconciler's latest tick and the outcome of its last executed pass."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from datum.core.vocab import Health
from datum.store.schema import reconciler_runs as t
from datum.store.types import UTCDateTime


def load_run(conn: Connection, reconciler: str) -> dict[str, Any] | None:
    """The stored run state of one reconciler, or None before its first tick."""
    row = conn.execute(sa.select(t).where(t.c.reconciler == reconciler)).mappings().first()
    return dict(row) if row else None


def load_runs(conn: Connection) -> dict[str, dict[str, Any]]:
    """Every reconciler's stored run state, by name."""
    return {r["reconciler"]: dict(r) for r in conn.execute(sa.select(t)).mappings()}


def record_skipped(conn: Connection, reconciler: str, now: datetime) -> None:
    """A tick that did not execute: only ``asOf`` moves."""
    updated = conn.execute(
        sa.update(t)
        .where(t.c.reconciler == reconciler)
        .values(as_of=now, skipped_passes=t.c.skipped_passes + 1)
    )
    if updated.rowcount == 0:
        conn.execute(
            sa.insert(t).values(
                reconciler=reconciler,
                as_of=now,
                health=Health.UNKNOWN.value,
                completed=False,
                skipped_passes=1,
                executed_passes=0,
                reasons={},
                items=[],
            )
        )


def record_executed(conn: Connection, reconciler: str, values: Mapping[str, Any]) -> None:
    """An executed tick: replace the pass outcome and move both ``asOf`` and ``lastRanAt``."""
    fields = dict(values)
    as_of = fields.pop("as_of")
    updated = conn.execute(
        sa.update(t)
        .where(t.c.reconciler == reconciler)
        .values(
            executed_passes=t.c.executed_passes + 1,
            # A tick skipped while this pass ran is newer: asOf never moves back.
            as_of=sa.case((t.c.as_of > as_of, t.c.as_of), else_=sa.literal(as_of, UTCDateTime)),
            **fields,
        )
    )
    if updated.rowcount == 0:
        conn.execute(
            sa.insert(t).values(
                reconciler=reconciler, executed_passes=1, skipped_passes=0, **values
            )
        )

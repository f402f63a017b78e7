"""Writes to a reconciler's desired-state table: compare-and-set on the status that was read.

``UPDATE table SET status = new WHERE key = id AND status IN (expected)``: no
row changed means someone else moved it meanwhile, and it is left alone. A
reconciler's pass writes through ``PassContext.compare_and_set`` (fenced);
its CLI or routes call ``set_status`` in their own transaction.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa


def set_status(
    conn: sa.Connection,
    table: sa.Table,
    key: str,
    status: str,
    expected: Collection[str],
    *,
    key_column: str = "name",
    status_column: str = "status",
    since_column: str | None = "updated_at",
    **values: Any,
) -> bool:
    """Move row ``key`` to ``status`` only from one of ``expected``; whether it moved."""
    stamp = {since_column: datetime.now(UTC)} if since_column else {}
    done = conn.execute(
        sa.update(table)
        .where(table.c[key_column] == key, table.c[status_column].in_(list(expected)))
        .values({status_column: status, **stamp, **values})
    )
    return bool(done.rowcount == 1)

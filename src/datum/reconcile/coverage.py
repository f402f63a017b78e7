"""Work-query coverage: one grouped query per declared kind, over its desired-state table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa

from datum.core.coverage import CoverageDecl, CoverageRow, histogram
from datum.store import Store


@dataclass(frozen=True)
class CoverageSpec:
    """Where one kind's desired state lives, and what its work query selects."""

    decl: CoverageDecl
    table: sa.Table
    status_column: str = "status"
    since_column: str = "updated_at"


def measure(store: Store, specs: Sequence[CoverageSpec], now: datetime) -> list[CoverageRow]:
    """The status histogram of every declared kind, with ``count`` and ``oldestAgeSeconds``.

    Age is measured from ``since_column``: how long the oldest row has sat in
    its status. Any database error propagates; the report turns it into
    ``coverageError``.
    """
    rows: list[CoverageRow] = []
    with store.connect() as conn:
        for spec in specs:
            status = spec.table.c[spec.status_column]
            since = spec.table.c[spec.since_column]
            query = sa.select(status, sa.func.count(), sa.func.min(since)).group_by(status)
            counts: dict[str, tuple[int, float]] = {}
            for value, count, oldest in conn.execute(query):
                age = (now - _aware(oldest)).total_seconds() if oldest is not None else 0.0
                counts[str(value)] = (int(count), age)
            rows.extend(histogram(spec.decl, counts))
    return rows


def _aware(value: datetime | str) -> datetime:
    if isinstance(value, str):  # SQLite returns min() of a DateTime column as text
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value

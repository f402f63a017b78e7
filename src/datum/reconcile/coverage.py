"""Work-query coverage: one grouped query per declared kind, over its desired-state table."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from datum.core.coverage import CoverageDecl, CoverageRow, histogram
from datum.store import Store, status_counts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CoverageSpec:
    """Where one kind's desired state lives, and what its work query selects.

    ``counted``: the table's per-status counts are kept by the database
    (``count_statuses`` in a migration of the plugin's branch), so the
    histogram reads them and one index probe per status for the age, instead
    of every row.
    """

    decl: CoverageDecl
    table: sa.Table
    status_column: str = "status"
    since_column: str = "updated_at"
    counted: bool = False


def measure(store: Store, specs: Sequence[CoverageSpec], now: datetime) -> list[CoverageRow]:
    """The status histogram of every declared kind, with ``count`` and ``oldestAgeSeconds``.

    Age is measured from ``since_column``: how long the oldest row has sat in
    its status. Any database error propagates; the report turns it into
    ``coverageError``.
    """
    rows: list[CoverageRow] = []
    to_compact: list[str] = []
    with store.connect() as conn:
        for spec in specs:
            counts: dict[str, tuple[int, float]] = {}
            logged = 0
            for value, count, oldest, entries in conn.execute(_query(spec)):
                logged += int(entries)
                if not count:
                    continue  # a status whose deltas sum to nothing: no rows, as a GROUP BY would say
                age = (now - _aware(oldest)).total_seconds() if oldest is not None else 0.0
                counts[str(value)] = (int(count), age)
            if logged > status_counts.COMPACT_AT:
                to_compact.append(spec.table.name)
            rows.extend(histogram(spec.decl, counts))
    for table in to_compact:
        try:
            status_counts.compact(store.engine, table)
        except sa.exc.SQLAlchemyError as exc:  # the counts are exact either way; only the next read is slower
            log.warning("could not fold the status count log of %s: %s", table, exc)
    return rows


def _query(spec: CoverageSpec) -> sa.Select[Any]:
    """status, count, oldest ``since``, entries of the count log: per status, in one statement (one snapshot)."""
    status = spec.table.c[spec.status_column]
    since = spec.table.c[spec.since_column]
    if not spec.counted:
        return sa.select(status, sa.func.count(), sa.func.min(since), sa.literal(0)).group_by(status)
    c = status_counts.counts_table(spec.table.name)
    per_status = (
        sa.select(c.c.status, sa.func.sum(c.c.n).label("n"), sa.func.count().label("entries"))
        .group_by(c.c.status)
        .subquery()
    )
    # one probe of the (status, since) index per status
    oldest = sa.select(sa.func.min(since)).where(status == per_status.c.status).scalar_subquery()
    return sa.select(per_status.c.status, per_status.c.n, oldest, per_status.c.entries)


def _aware(value: datetime | str) -> datetime:
    if isinstance(value, str):  # SQLite returns min() of a DateTime column as text
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value

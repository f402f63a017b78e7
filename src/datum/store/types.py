"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A timestamp stored in UTC and always read back timezone-aware."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class ReadableTime(UTCDateTime):
    """``UTCDateTime`` for reads that must survive a value edited by hand: one that does not parse reads None.

    SQLite keeps a timestamp as text, so a hand edit can leave one that no date
    parser reads, and SQLAlchemy's processor raises on it, failing the whole
    query. Read through this (``sa.type_coerce(column, ReadableTime)``) such a
    value is None: that row's time unknown, every other row and column as read.
    """

    cache_ok = True

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        process = super().result_processor(dialect, coltype)
        if process is None:  # pragma: no cover - UTCDateTime always converts
            return None

        def readable(value: Any) -> datetime | None:
            try:
                return process(value)  # type: ignore[no-any-return]
            except (ValueError, TypeError):
                return None

        return readable


def insert_for(dialect: str) -> Any:
    """The dialect's ``insert`` (the one with ``on_conflict_do_update``): a statement both stores run is built
    once for each."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert


def param(name: str, type_: Any = None) -> Any:
    """A bound value of a statement both stores run (``datum.store.hosts``' intake), named ``p_<name>``: apart from
    every column, since an INSERT or UPDATE run with a parameter named as a column would also write that column."""
    return sa.bindparam(f"p_{name}", type_=type_)


# JSON written from text the caller serialised once (a report is JSON text already when it arrives), and compared
# as JSON: what a statement both stores run says where the two dialects differ.

def json_value(text: Any, dialect: str) -> Any:
    """``text`` (JSON text, a bound value or a column) as the store's JSON: cast to ``json`` on PostgreSQL, the
    text itself on SQLite (where JSON is text; a ``CAST`` there would take it for a number)."""
    return sa.cast(text, sa.JSON) if dialect == "postgresql" else text


def same_json(stored: Any, text: Any, dialect: str) -> Any:
    """Whether a stored JSON value and JSON text are the same value, NULL the same as NULL: ``jsonb`` equality on
    PostgreSQL; on SQLite the two texts minified by ``json()`` (keys in the order written: the writers of a
    compared value write it from a sorted map, ``datum.store.history.grouped``)."""
    if dialect == "postgresql":
        return sa.cast(stored, JSONB).is_not_distinct_from(sa.cast(text, JSONB))
    return sa.func.json(stored).is_not_distinct_from(sa.func.json(text))

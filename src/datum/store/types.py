"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa


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

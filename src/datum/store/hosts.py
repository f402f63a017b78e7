"""Host state across passes: the last pass report of every host the store knows."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from datum.store.engine import Store
from datum.store.schema import hosts


def _values(report: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    finished = report.get("finishedAt")
    seq = report.get("seq")
    seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
    values = {
        "state": report["state"],
        "reason": report.get("reason"),
        "boot_id": report.get("bootId"),
        "finished_at": datetime.fromisoformat(finished) if isinstance(finished, str) else finished,
        "updated_at": datetime.now(UTC),
        "report": report,
        "pass_id": report.get("passId"),
        "seq": seq,
    }
    return values, seq


def _clock(dialect: str) -> Any:
    """The store's clock as a column expression (``datum.store.runs.store_now`` without its own query)."""
    if dialect == "postgresql":
        return sa.func.clock_timestamp()
    return sa.func.strftime("%Y-%m-%d %H:%M:%f", "now")


def _as_utc(value: Any) -> datetime:
    if isinstance(value, str):
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Taken:
    """What became of one reported pass.

    ``outcome`` is ``"stored"``, ``"duplicate"`` or ``"older"``; ``row`` is the host's row as
    ``get_host`` reads it: the one just written (built from what was written, not read back)
    or, for a pass not stored, the one kept.
    """

    outcome: str
    row: dict[str, Any]


def take_pass(
    store: Store,
    host: str,
    report: dict[str, Any],
    on_stored: Callable[[Connection, datetime], None] | None = None,
) -> Taken:
    """Persist ``report`` (a ``PassReport`` in its JSON form) as ``host``'s latest pass.

    A report with a ``seq`` (an agent's per-host sequence number) replaces the
    stored one only when it is newer: the same pass again is ``"duplicate"``,
    an older one ``"older"``; both leave the row alone. Otherwise it is
    ``"stored"``. The comparison and the write are one statement (an INSERT
    whose conflict updates only under the sequence rule), so two servers taking
    the same host's reports at once cannot put an older pass last, and a stored
    pass costs one round trip. ``on_stored(conn, now)`` runs in the same
    transaction when the pass was stored, ``now`` the store's clock.
    """
    values, seq = _values(report)
    dialect = store.engine.dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    stmt = insert(hosts).values(host=host, **values)
    newer = None if seq is None else sa.or_(hosts.c.seq.is_(None), hosts.c.seq < seq)
    stmt = stmt.on_conflict_do_update(
        index_elements=[hosts.c.host], set_={k: stmt.excluded[k] for k in values}, where=newer
    ).returning(_clock(dialect).label("now"))
    with store.begin() as conn:
        now = conn.execute(stmt).scalar()
        if now is not None:
            if on_stored is not None:
                on_stored(conn, _as_utc(now))
            return Taken("stored", {
                "host": host,
                "state": values["state"],
                "reason": values["reason"],
                "bootId": values["boot_id"],
                "finishedAt": values["finished_at"],
                "updatedAt": values["updated_at"],
                "report": report,
                "passId": values["pass_id"],
                "seq": seq,
            })
        r = conn.execute(sa.select(*_COLUMNS, _RAW).where(hosts.c.host == host)).mappings().first()
    if r is None:  # pragma: no cover - a conflict means the row is there
        raise RuntimeError(f"the pass of {host!r} was neither stored nor found")
    row = _row(r)
    same = row["passId"] is not None and row["passId"] == report.get("passId")
    return Taken("duplicate" if same or row["seq"] == seq else "older", row)


def record_pass(store: Store, host: str, report: dict[str, Any]) -> str:
    """``take_pass`` for who needs only the outcome: ``"stored"``, ``"duplicate"`` or ``"older"``."""
    return take_pass(store, host, report).outcome


# The report column as the store holds it: text that may not be JSON at all (a torn write, a
# hand edit). It is parsed here, row by row, so one bad row makes one host unknown, not the list fail.
_COLUMNS = [c for c in hosts.c if c.name != "report"]
_RAW = sa.type_coerce(hosts.c.report, sa.Text).label("report")


def _report(raw: Any) -> tuple[Any, str | None]:
    """The stored report and, when it cannot be read, why."""
    if raw is None or isinstance(raw, dict | list):
        return raw, None
    if isinstance(raw, bytes | bytearray | memoryview):
        raw = bytes(raw).decode("utf-8", "replace")
    try:
        return json.loads(raw), None
    except ValueError as exc:
        return None, f"the stored report is not valid JSON ({exc})"


def _row(r: Any) -> dict[str, Any]:
    report, unreadable = _report(r["report"])
    row = {
        "host": r["host"],
        "state": r["state"],
        "reason": r["reason"],
        "bootId": r["boot_id"],
        "finishedAt": r["finished_at"],
        "updatedAt": r["updated_at"],
        "report": report,
        "passId": r["pass_id"],
        "seq": r["seq"],
    }
    if unreadable:
        row["unreadable"] = unreadable
    return row


def get_host(store: Store, host: str) -> dict[str, Any] | None:
    """One host's latest state and pass report, or None when the store has never heard of it.

    A report that is not JSON comes back as None with ``unreadable`` saying why.
    """
    with store.connect() as conn:
        r = conn.execute(sa.select(*_COLUMNS, _RAW).where(hosts.c.host == host)).mappings().first()
    return _row(r) if r else None


def list_hosts(store: Store) -> list[dict[str, Any]]:
    """Every known host's latest state, by name (a row whose report is not JSON: see ``get_host``)."""
    with store.connect() as conn:
        rows = conn.execute(sa.select(*_COLUMNS, _RAW).order_by(hosts.c.host)).mappings()
        return [_row(r) for r in rows]

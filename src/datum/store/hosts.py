"""Host state across passes: the last pass report of every host the store knows."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from datum.store.engine import Store
from datum.store.schema import hosts


def record_pass(store: Store, host: str, report: dict[str, Any]) -> None:
    """Persist ``report`` (a ``PassReport`` in its JSON form) as ``host``'s latest pass."""
    finished = report.get("finishedAt")
    values = {
        "state": report["state"],
        "reason": report.get("reason"),
        "boot_id": report.get("bootId"),
        "finished_at": datetime.fromisoformat(finished) if isinstance(finished, str) else finished,
        "updated_at": datetime.now(UTC),
        "report": report,
    }
    with store.begin() as conn:
        updated = conn.execute(sa.update(hosts).where(hosts.c.host == host).values(**values))
        if updated.rowcount == 0:
            conn.execute(sa.insert(hosts).values(host=host, **values))


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

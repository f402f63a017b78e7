"""Host state across passes: the last pass report of every host the store knows."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from datum.store.engine import Store
from datum.store.schema import hosts


def record_pass(store: Store, host: str, report: dict[str, Any]) -> str:
    """Persist ``report`` (a ``PassReport`` in its JSON form) as ``host``'s latest pass.

    A report with a ``seq`` (an agent's per-host sequence number) replaces the
    stored one only when it is newer: the same pass again is ``"duplicate"``,
    an older one ``"older"``; both leave the row alone. Returns ``"stored"``
    otherwise. The comparison and the write are one statement, so two servers
    taking the same host's reports at once cannot put an older pass last.
    """
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
    newer = sa.true() if seq is None else sa.or_(hosts.c.seq.is_(None), hosts.c.seq < seq)
    with store.begin() as conn:
        updated = conn.execute(sa.update(hosts).where(hosts.c.host == host, newer).values(**values))
        if updated.rowcount:
            return "stored"
        row = conn.execute(sa.select(hosts.c.pass_id, hosts.c.seq).where(hosts.c.host == host)).first()
        if row is None:
            conn.execute(sa.insert(hosts).values(host=host, **values))
            return "stored"
    same = row.pass_id is not None and row.pass_id == report.get("passId")
    return "duplicate" if same or row.seq == seq else "older"


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

"""Host state across passes: the last pass report of every host the store knows."""

from __future__ import annotations

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


def _row(r: Any) -> dict[str, Any]:
    return {
        "host": r["host"],
        "state": r["state"],
        "reason": r["reason"],
        "bootId": r["boot_id"],
        "finishedAt": r["finished_at"],
        "updatedAt": r["updated_at"],
        "report": r["report"],
    }


def get_host(store: Store, host: str) -> dict[str, Any] | None:
    """One host's latest state and pass report, or None when the store has never heard of it."""
    with store.connect() as conn:
        r = conn.execute(sa.select(hosts).where(hosts.c.host == host)).mappings().first()
    return _row(r) if r else None


def list_hosts(store: Store) -> list[dict[str, Any]]:
    """Every known host's latest state, by name."""
    with store.connect() as conn:
        return [_row(r) for r in conn.execute(sa.select(hosts).order_by(hosts.c.host)).mappings()]

"""Each reconciler's latest tick, the outcome of its last executed pass, and its claim.

The claim is the fencing token of the run row (``claim``): raised by one each
time a pass claims the reconciler, so a pass that was overtaken can tell. Its
writes check the token first (``check_claim``) in the same transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from datum.core.vocab import Health
from datum.store.schema import reconciler_runs as t
from datum.store.types import UTCDateTime

# Keys of ``reconciler_runs.metrics`` beside the metric counts (see the schema).
ITEMS_REPORTED = "itemsReported"
COVERAGE = "coverage"
REQUEUE = "requeueAfterPasses"


def load_run(conn: Connection, reconciler: str) -> dict[str, Any] | None:
    """The stored run state of one reconciler, or None before its first tick."""
    row = conn.execute(sa.select(t).where(t.c.reconciler == reconciler)).mappings().first()
    return dict(row) if row else None


def load_runs(conn: Connection) -> dict[str, dict[str, Any]]:
    """Every reconciler's stored run state, by name."""
    return {r["reconciler"]: dict(r) for r in conn.execute(sa.select(t)).mappings()}


def versions(conn: Connection) -> dict[str, int]:
    """Each reconciler's version: how many ticks it recorded (executed and skipped), by name.

    Every write that changes a drift report's run row (``record_executed``,
    ``record_skipped``) raises it by one, whichever process ticked: a reader
    that saw it change knows its report is out of date. One small read.
    """
    rows = conn.execute(sa.select(t.c.reconciler, t.c.executed_passes + t.c.skipped_passes))
    return {name: int(n) for name, n in rows}


def record_skipped(conn: Connection, reconciler: str, now: datetime) -> None:
    """A tick that did not execute: only ``asOf`` moves."""
    updated = conn.execute(
        sa.update(t)
        .where(t.c.reconciler == reconciler)
        .values(as_of=now, skipped_passes=t.c.skipped_passes + 1)
    )
    if updated.rowcount == 0:
        conn.execute(sa.insert(t).values(_first_row(reconciler, now, skipped_passes=1)))


def _first_row(reconciler: str, now: datetime, **values: int) -> dict[str, Any]:
    """A reconciler's run row before any pass executed."""
    return {
        "reconciler": reconciler,
        "as_of": now,
        "health": Health.UNKNOWN.value,
        "completed": False,
        "skipped_passes": 0,
        "executed_passes": 0,
        "reasons": {},
        "items": [],
        **values,
    }


def record_executed(conn: Connection, reconciler: str, values: Mapping[str, Any]) -> None:
    """An executed tick: replace the pass outcome and move both ``asOf`` and ``lastRanAt``."""
    fields = dict(values)
    as_of = fields.pop("as_of")
    updated = conn.execute(
        sa.update(t)
        .where(t.c.reconciler == reconciler)
        .values(
            executed_passes=t.c.executed_passes + 1,
            running_since=None,  # the pass ended
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


class LostClaim(Exception):
    """A pass lost its claim on its reconciler (overtaken by a newer one): it may write nothing."""

    def __init__(self, reconciler: str, token: int, current: int | None) -> None:
        now = "no claim" if current is None else f"claim {current}"
        super().__init__(
            f"the pass of {reconciler} lost its claim ({token}; the store now holds {now}): "
            "another pass took the reconciler over, so this one writes nothing"
        )
        self.reconciler = reconciler
        self.token = token
        self.current = current


class NotDue(Exception):
    """A scheduled tick came before ``lastRanAt + interval`` by the store's clock."""

    def __init__(self, reconciler: str, now: datetime, due: datetime) -> None:
        super().__init__(f"{reconciler} is not due until {due.isoformat()} (store clock {now.isoformat()})")
        self.now = now
        self.due = due


@dataclass(frozen=True)
class Claimed:
    """A claim taken: the fencing token and the tick's time."""

    token: int
    now: datetime


def store_now(conn: Connection) -> datetime:
    """The store's clock, in UTC: the one clock every runner on the store shares."""
    if conn.dialect.name == "postgresql":
        value = conn.execute(sa.select(sa.func.clock_timestamp())).scalar_one()
        return value.astimezone(UTC)  # type: ignore[no-any-return]
    text = conn.execute(sa.text("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")).scalar_one()
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def raise_claim(conn: Connection, reconciler: str) -> bool:
    """Raise the fencing token by one: every pass holding an older one writes nothing from now on.

    False when the reconciler has no run row yet (no pass ever claimed it).
    """
    raised = conn.execute(
        sa.update(t).where(t.c.reconciler == reconciler).values(claim=t.c.claim + 1)
    )
    return raised.rowcount == 1


def take_claim(
    conn: Connection,
    reconciler: str,
    now: datetime | None = None,
    interval: timedelta | None = None,
) -> Claimed:
    """Claim ``reconciler``: raise its token by one and return it, with the tick's time.

    ``now`` is the store's clock unless given (deterministic runs). With
    ``interval`` (a scheduled tick) the claim is refused with ``NotDue`` before
    ``lastRanAt + interval`` (times the requeue the last pass asked for); the
    caller's transaction must then roll back.
    The token increment takes the run row's write lock, so two claimers are
    serialised by the database even without the session lock.
    """
    raised = raise_claim(conn, reconciler)
    if now is None:
        now = store_now(conn)
    if not raised:
        try:
            with conn.begin_nested():
                conn.execute(sa.insert(t).values(_first_row(reconciler, now, claim=1)))
        except sa.exc.IntegrityError:
            raise_claim(conn, reconciler)
    row = conn.execute(
        sa.select(t.c.claim, t.c.last_ran_at, t.c.metrics).where(t.c.reconciler == reconciler)
    ).one()
    if interval is not None and row.last_ran_at is not None:
        # A pass that asked to be requeued after N passes is due N intervals on.
        requeue = (row.metrics or {}).get(REQUEUE) if isinstance(row.metrics, dict) else None
        due = row.last_ran_at + interval * max(1, int(requeue or 1))
        if now < due:
            raise NotDue(reconciler, now, due)
    conn.execute(sa.update(t).where(t.c.reconciler == reconciler).values(running_since=now))
    return Claimed(int(row.claim), now)


def check_claim(conn: Connection, reconciler: str, token: int) -> None:
    """Fence: raise ``LostClaim`` unless the run row still holds ``token``.

    A conditional UPDATE, so the row stays write-locked by this transaction
    until it commits: no claim can slip in between the check and the writes.
    """
    held = conn.execute(
        sa.update(t)
        .where(t.c.reconciler == reconciler, t.c.claim == token)
        .values(claim=t.c.claim)
    )
    if held.rowcount != 1:
        current = conn.execute(
            sa.select(t.c.claim).where(t.c.reconciler == reconciler)
        ).scalar()
        raise LostClaim(reconciler, token, None if current is None else int(current))

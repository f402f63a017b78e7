"""The audit log's chain as a whole: a row written in a transaction of its own, the rows written since sealed into
the chain (``seal``), the rows read a page at a time, the chain verified from its anchor to its head, the oldest
rows pruned (``[server] audit_keep``).

What a row is and how one is written in the change's transaction is ``datum.store.audit``, which the store's
engine calls at each commit; this module reads and keeps the chain through the engine, so neither imports the
other back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from datum.store.audit import (
    ANCHOR,
    COLUMNS,
    GENESIS,
    HEAD,
    Entry,
    as_utc,
    digest,
    own_row,
    record,
    when,
)
from datum.store.engine import Store
from datum.store.passes import After
from datum.store.schema import audit_chain as chain
from datum.store.schema import audit_log as t

SEAL_BATCH = 500  # rows sealed per transaction: the head is held that long, and no longer


def write(store: Store, entry: Entry) -> None:
    """``entry``'s row in a transaction of its own (a refusal, an act that changed nothing), sealed later."""
    with store.begin() as conn:
        own_row(conn)  # this is the row: the request's pending one (``entry`` itself) is not due here
        record(conn, entry)


# -- sealing ----------------------------------------------------------------------------------------


def seal(store: Store, *, batch: int = SEAL_BATCH) -> int:
    """Chain the rows written and not sealed yet, in the order of their id, ``batch`` per transaction: each gets
    the next seq, the hash of the row before it (``prev``) and its own (``digest``); how many were sealed.

    Each transaction first moves the chain's head (an UPDATE: on PostgreSQL the head's row lock, on SQLite the
    file's write lock), so two servers sealing at once take turns and the second continues the line the first
    left; then it reads the rows not sealed that are committed (a row whose transaction commits later is sealed
    by a later seal, after these). A seal that dies before its commit seals nothing: the rows wait for the next.
    With no row waiting (a read of the unsealed rows' index) it writes nothing: an idle server's seal every second
    takes no lock and writes no WAL.
    """
    with store.connect() as conn:
        if conn.execute(sa.select(t.c.id).where(t.c.seq.is_(None)).limit(1)).first() is None:
            return 0
    sealed = 0
    while True:
        # one_writer: on SQLite the intake's writers in this process queue behind the seal's batch and are woken as
        # it commits, instead of sleeping in SQLite's busy handler while it holds the file (nothing on PostgreSQL)
        with store.one_writer(), store.begin() as conn:
            own_row(conn)  # not a request's change: a pending row is not due here
            head = conn.execute(
                sa.update(chain).where(chain.c.name == HEAD).values(seq=chain.c.seq)
                .returning(chain.c.seq, chain.c.hash)
            ).one()
            rows = conn.execute(_UNSEALED, {"most": batch}).all()
            seq, prev = int(head.seq), str(head.hash)
            chained: list[dict[str, Any]] = []
            for row, at, *fields in rows:
                seq += 1
                own = digest(seq, as_utc(at), dict(zip(COLUMNS, fields, strict=True)), prev)
                chained.append({"row": row, "to_seq": seq, "to_prev": prev, "to_hash": own})
                prev = own
            if chained:
                _sealed(conn, chained)
                conn.execute(sa.update(chain).where(chain.c.name == HEAD).values(
                    seq=seq, hash=prev, prev=chained[-1]["to_prev"], at=rows[-1][1]))
        sealed += len(rows)
        if len(rows) < batch:
            return sealed


# The rows waiting to be sealed, oldest first: their id, time and fields (what the hash covers), as plain tuples.
_UNSEALED = (sa.select(t.c.id, t.c.at, *(t.c[c] for c in COLUMNS)).where(t.c.seq.is_(None)).order_by(t.c.id)
             .limit(sa.bindparam("most")))


# The rows of a batch given their seq and hashes by one statement: on PostgreSQL one UPDATE ... FROM unnest() of
# four arrays (one round trip, one plan, whatever the batch's size: built once); on SQLite one UPDATE run over the
# batch (executemany: in-process, no round trip to save).
_BY_ROW = sa.update(t).where(t.c.id == sa.bindparam("row"), t.c.seq.is_(None)).values(
    seq=sa.bindparam("to_seq"), prev=sa.bindparam("to_prev"), hash=sa.bindparam("to_hash"))
_batch = sa.func.unnest(
    sa.bindparam("rows", type_=postgresql.ARRAY(sa.BigInteger)),
    sa.bindparam("seqs", type_=postgresql.ARRAY(sa.BigInteger)),
    sa.bindparam("prevs", type_=postgresql.ARRAY(sa.String)),
    sa.bindparam("hashes", type_=postgresql.ARRAY(sa.String)),
).table_valued("row_id", "to_seq", "to_prev", "to_hash").render_derived(name="sealed")
_BATCH = sa.update(t).where(t.c.id == _batch.c.row_id, t.c.seq.is_(None)).values(
    seq=_batch.c.to_seq, prev=_batch.c.to_prev, hash=_batch.c.to_hash)


def _sealed(conn: sa.Connection, chained: list[dict[str, Any]]) -> None:
    """Write the seq, prev and hash of every row of ``chained`` (``row``, ``to_seq``, ``to_prev``, ``to_hash``)."""
    if conn.dialect.name != "postgresql":
        conn.execute(_BY_ROW, chained)
        return
    conn.execute(_BATCH, {
        "rows": [c["row"] for c in chained], "seqs": [c["to_seq"] for c in chained],
        "prevs": [c["to_prev"] for c in chained], "hashes": [c["to_hash"] for c in chained],
    })


def unsealed(store: Store) -> int:
    """How many rows wait to be sealed."""
    with store.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(t).where(t.c.seq.is_(None))).scalar_one())


# -- reading ----------------------------------------------------------------------------------------


def _row(r: Any) -> dict[str, Any]:
    return {
        "id": int(r.id), "seq": None if r.seq is None else int(r.seq), "at": r.at, "principal": r.principal, "tokenId": r.token, "source": r.source,
        "action": r.action, "resource": r.resource, "request": r.request, "outcome": r.outcome,
        "status": r.status, "policy": r.policy, "detail": r.detail, "prev": r.prev, "hash": r.hash,
    }


def entries(
    store: Store, *, since: datetime | None = None, until: datetime | None = None, principal: str | None = None,
    action: str | None = None, after: After | None = None, limit: int,
) -> list[dict[str, Any]]:
    """Up to ``limit`` rows, newest first (by id: the order they were written in, sealed or not yet), after the
    cursor's ``after`` (its id is a row's), each filter exact; ``since``/``until``: written at or after, before."""
    query = sa.select(t)
    if after is not None:
        query = query.where(t.c.id < after.id)
    if since is not None:
        query = query.where(t.c.at >= sa.literal(since, t.c.at.type))
    if until is not None:
        query = query.where(t.c.at < sa.literal(until, t.c.at.type))
    if principal is not None:
        query = query.where(t.c.principal == principal)
    if action is not None:
        query = query.where(t.c.action == action)
    with store.connect() as conn:
        return [_row(r) for r in conn.execute(query.order_by(t.c.id.desc()).limit(limit))]


# -- verifying --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class End:
    """One end of the chain: a row's seq and hash (and, for the anchor, when the last pruned row was written)."""

    seq: int
    hash: str
    at: datetime | None = None


@dataclass(frozen=True)
class Verified:
    """What ``verify`` found: the rows it checked, the chain's ends, the first row that does not hold, and how many
    rows were written but not sealed yet (not in the chain: verified once sealed)."""

    rows: int
    anchor: End
    head: End
    broken: int | None = None  # the seq of the first broken row
    why: str | None = None
    unsealed: int = 0

    @property
    def whole(self) -> bool:
        return self.broken is None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "whole": self.whole, "rows": self.rows,
            "anchor": {"seq": self.anchor.seq, "hash": self.anchor.hash,
                       "at": when(self.anchor.at) if self.anchor.at else None},
            "head": {"seq": self.head.seq, "hash": self.head.hash},
            "unsealed": self.unsealed,
        }
        if self.broken is not None:
            out["broken"] = {"seq": self.broken, "why": self.why}
        return out


def verify(store: Store, *, batch: int = 5000) -> Verified:
    """Walk the chain from its anchor to its head in one snapshot, recomputing every row's hash; the first row
    that does not hold (edited, missing, chained to another than the row before it) is ``broken``. Rows written and
    not sealed yet are counted (``unsealed``), not checked: ``seal`` them first to check them."""
    with store.connect() as conn:
        if conn.dialect.name == "postgresql":  # the ends and every row as of one moment, whatever is written meanwhile
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            ends = {r.name: r for r in conn.execute(sa.select(chain))}
            if HEAD not in ends or ANCHOR not in ends:
                missing = End(0, GENESIS)
                return Verified(0, missing, missing, 0, f"the chain's {HEAD if HEAD not in ends else ANCHOR} row "
                                                        "(audit_chain) is missing")
            anchor = End(int(ends[ANCHOR].seq), str(ends[ANCHOR].hash), ends[ANCHOR].at)
            head = End(int(ends[HEAD].seq), str(ends[HEAD].hash))
            waiting = int(conn.execute(sa.select(sa.func.count()).select_from(t).where(t.c.seq.is_(None))).scalar_one())
            seq, prev, rows = anchor.seq, anchor.hash, 0
            while True:
                page = conn.execute(sa.select(t).where(t.c.seq > seq).order_by(t.c.seq).limit(batch)).all()
                for r in page:
                    found = _fault(r, seq, prev)
                    if found is not None:
                        return Verified(rows, anchor, head, found[0], found[1], waiting)
                    seq, prev, rows = int(r.seq), str(r.hash), rows + 1
                if len(page) < batch:
                    break
    if (seq, prev) != (head.seq, head.hash):
        return Verified(rows, anchor, head, seq + 1,
                        f"the chain ends at row {seq} but its head names row {head.seq}: rows after {seq} are missing"
                        if head.seq > seq else f"the chain's head names row {head.seq}, not its last row {seq}",
                        waiting)
    return Verified(rows, anchor, head, unsealed=waiting)


def _fault(r: Any, seq: int, prev: str) -> tuple[int, str] | None:
    """Why row ``r`` does not follow row ``seq`` (of hash ``prev``), or None."""
    if int(r.seq) != seq + 1:
        return seq + 1, f"row {seq + 1} is missing (the row after {seq} is {int(r.seq)})"
    if r.prev != prev:
        return int(r.seq), f"row {int(r.seq)} is chained to another row than {seq} (its prev is not that row's hash)"
    values = {c: getattr(r, c) for c in COLUMNS}
    if r.at is None or digest(int(r.seq), r.at, values, str(r.prev)) != r.hash:
        return int(r.seq), f"row {int(r.seq)} was changed after it was written (its hash does not match its fields)"
    return None


# -- retention --------------------------------------------------------------------------------------


def prune(store: Store, before: datetime, *, batch: int = 1000) -> int:
    """Drop the oldest sealed rows, every one up to the first written at or after ``before`` (the chain's order: a
    row is never dropped while an older one is kept; one not sealed yet is never dropped), ``batch`` per
    transaction, each moving the anchor to the last row it dropped; how many went."""
    gone = 0
    cutoff = sa.literal(before, t.c.at.type)
    while True:
        with store.begin() as conn:
            keep = conn.execute(sa.select(sa.func.min(t.c.seq)).where(t.c.at >= cutoff)).scalar()
            # sealed rows only: a row not sealed yet is newer than the chain, whatever its time
            upto = sa.select(t.c.seq, t.c.hash, t.c.at).where(t.c.seq.is_not(None)).order_by(t.c.seq).limit(batch)
            if keep is not None:
                upto = upto.where(t.c.seq < keep)
            rows = conn.execute(upto).all()
            if rows:
                last = rows[-1]
                conn.execute(sa.delete(t).where(t.c.seq <= last.seq))
                conn.execute(
                    sa.update(chain).where(chain.c.name == ANCHOR, chain.c.seq < last.seq)
                    .values(seq=last.seq, hash=last.hash, at=last.at)
                )
        gone += len(rows)
        if len(rows) < batch:
            return gone


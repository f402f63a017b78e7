"""Nonces taken once: a host's signed proof (an enrollment, a session) is good for one request, on every replica.

A nonce is the server's (``datum.fleet.enroll.nonce``: its time, random bytes,
an HMAC) and good for two minutes; without this a proof captured in that time
(a log, a proxy) could be sent again for another session. ``spend`` inserts it
into ``spent_nonces`` with ``ON CONFLICT DO NOTHING``: the store's primary key
decides, so of two requests with one nonce, on one server or two, exactly one
takes it. Rows are kept until ``expires_at`` (past the nonce's life, with room
for the replicas' clocks) and ``purge`` drops the rest, off the request path.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from datum.store import audit
from datum.store.engine import Store
from datum.store.schema import spent_nonces
from datum.store.types import insert_for


def spend(store: Store, nonce: str, expires_at: datetime) -> bool:
    """Take ``nonce`` (kept until ``expires_at``): True the first time, on any server of ``store``; False after."""
    with store.begin() as conn:
        audit.unchanged(conn)  # a proof spent is not what its request asked for: the request's row is not this one's
        return take(conn, nonce, expires_at)


def take(conn: sa.Connection, nonce: str, expires_at: datetime) -> bool:
    """``spend`` in the caller's transaction (``conn``, of ``store.begin()``): the nonce is spent when, and only
    if, that transaction commits (what the proof asked for stored with it); of two transactions taking one
    nonce the second waits for the first and takes it only if the first rolled back."""
    insert = insert_for(conn.dialect.name)
    stmt = insert(spent_nonces).values(nonce=nonce, expires_at=expires_at)
    # RETURNING, not rowcount: psycopg says -1 for an INSERT ... ON CONFLICT
    taken = conn.execute(stmt.on_conflict_do_nothing(index_elements=[spent_nonces.c.nonce])
                         .returning(spent_nonces.c.nonce)).first()
    return taken is not None


def purge(store: Store, now: datetime) -> int:
    """Drop the nonces no server would take any more (``expires_at`` passed); how many."""
    with store.begin() as conn:
        return int(conn.execute(sa.delete(spent_nonces).where(spent_nonces.c.expires_at <= now)).rowcount or 0)

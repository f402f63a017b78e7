"""Leases: one holder at a time per name, with an expiry so a crashed holder cannot wedge it."""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa

from datum.store.engine import Store
from datum.store.schema import locks as t


def try_acquire(store: Store, name: str, holder: str, now: datetime, ttl: timedelta) -> bool:
    """Take the lease ``name`` for ``holder`` unless someone else holds an unexpired one."""
    with store.begin() as conn:
        exists = conn.execute(sa.select(t.c.name).where(t.c.name == name)).first()
        if exists is None:
            try:
                with conn.begin_nested():
                    conn.execute(
                        sa.insert(t).values(name=name, holder=holder, expires_at=now + ttl)
                    )
                return True
            except sa.exc.IntegrityError:
                pass
        taken = conn.execute(
            sa.update(t)
            .where(
                t.c.name == name,
                sa.or_(t.c.holder.is_(None), t.c.expires_at < now, t.c.holder == holder),
            )
            .values(holder=holder, expires_at=now + ttl)
        )
        return taken.rowcount == 1


def release(store: Store, name: str, holder: str) -> None:
    """Give the lease back, if ``holder`` still holds it."""
    with store.begin() as conn:
        conn.execute(
            sa.update(t)
            .where(t.c.name == name, t.c.holder == holder)
            .values(holder=None, expires_at=None)
        )

"""The fleet directory's revisions in the store: which a server has served, when first, and who runs which.

A server records each revision (``datum.fleet.revision``) the first time it
serves it, at the store's clock: every replica on the store then agrees on
when a revision was first seen, whichever replica saw it. Which revision a
host runs is in its summary (``datum.core.hostsummary``, from its last pass
report): counting hosts per revision reads the summaries, never a report.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from datum.store.engine import Store
from datum.store.hosts import revision_counts
from datum.store.runs import store_now
from datum.store.schema import hosts, revisions
from datum.store.types import insert_for


@dataclass(frozen=True, slots=True)
class Seen:
    id: str
    first_seen: datetime
    git_commit: str | None


def record(store: Store, revision: str, git_commit: str | None) -> None:
    """Record ``revision`` as seen now (the store's clock) unless it was seen before; any replica may race."""
    insert = insert_for(store.dialect)
    with store.begin() as conn:
        stmt = insert(revisions).values(id=revision, first_seen=store_now(conn), git_commit=git_commit)
        conn.execute(stmt.on_conflict_do_nothing(index_elements=[revisions.c.id]))


def seen(store: Store, ids: list[str]) -> dict[str, Seen]:
    """The recorded revisions among ``ids``."""
    if not ids:
        return {}
    with store.connect() as conn:
        rows = conn.execute(sa.select(revisions).where(revisions.c.id.in_(ids))).mappings().all()
    return {r["id"]: Seen(r["id"], r["first_seen"], r["git_commit"]) for r in rows}


def floor(store: Store, host: str, previous: str | None) -> str | None:
    """The per-host floor: the revision ``host``'s last pass ran, when the store first saw it after
    ``previous`` (None: ``previous`` stands). A host held back by a rollout is never served a revision
    older than the one it last ran: a rollout that begins from the fleet's last ``done`` (rollouts
    switched off and on, a fix pushed meanwhile) must not take back the hosts that ran something newer.
    One read by primary key, and one of at most two revisions."""
    with store.connect() as conn:
        ran = conn.execute(sa.select(hosts.c.revision).where(hosts.c.host == host)).scalar()
        if ran is None or ran == previous:
            return None
        wanted = [ran] if previous is None else [ran, previous]
        times = dict(conn.execute(sa.select(revisions.c.id, revisions.c.first_seen).where(revisions.c.id.in_(wanted))).all())
    if ran not in times:  # a revision this store never served (a hand-made report): not a floor
        return None
    if previous is not None and previous in times and times[ran] <= times[previous]:
        return None
    return str(ran)


def running(store: Store, multiple: float, now: datetime) -> dict[str | None, Counter[str]]:
    """Per revision (None: the hosts whose last pass says none), its hosts by the state they read at ``now``
    (a silent host reads ``unknown``, as the listing says), from the counts the database keeps
    (``datum.store.hosts.revision_counts``): no read of every host."""
    out: dict[str | None, Counter[str]] = {}
    for (revision, state), n in revision_counts(store, multiple, now).items():
        out.setdefault(revision, Counter())[state] += n
    return out


def without_origins(store: Store) -> Counter[str]:
    """The hosts whose last pass names no revision, by what their report says of where its manifest came from
    (``manifestOrigin``, which only ``datum agent`` sets): ``apply`` (none: ``datum apply --report-to``),
    ``cached`` (the agent ran the manifest it kept, the server not reached), ``older`` (served by the server,
    with no revision: an agent older than revisions). Counted by the database, over those hosts only; a stored
    report that is not JSON (SQLite holds text: a hand edit, a torn write) is in none of them, never an error."""
    unnamed = sa.or_(hosts.c.revision.is_(None), hosts.c.revision == "")
    if store.dialect == "sqlite":
        raw = sa.type_coerce(hosts.c.report, sa.Text)
        origin: Any = sa.func.json_extract(raw, "$.manifestOrigin")
        unnamed = sa.and_(unnamed, sa.case((sa.func.json_valid(raw) == 1, sa.func.json_type(raw)), else_=None) == "object")  # CASE: in order
    else:
        origin = hosts.c.report["manifestOrigin"].as_string()
    kind = sa.case((origin.is_(None), "apply"), (origin.like("cached:%"), "cached"), else_="older")
    with store.connect() as conn:
        rows = conn.execute(sa.select(kind, sa.func.count()).where(unnamed).group_by(kind))
        return Counter({str(k): int(n) for k, n in rows})

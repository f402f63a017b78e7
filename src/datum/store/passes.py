"""The pass archive: every delivered host pass, its report kept once by digest, its events, and retention.

One truth for "what a pass was": the host rows of ``pass_history`` (``datum.store.history`` writes them at
intake, stored and older passes alike). This module adds what the archive needs beside them, in the
writer's transaction, and reads them back:

- ``pass_reports``: each distinct report once, under ``datum.core.passcontent.content_digest``. A pass
  that said what an earlier one said (most passes) costs its ``pass_history`` row only: times, state,
  counts and the digest. Its whole report is the kept one with its own per-pass fields put back.
- ``pass_events``: one row per resource a pass changed or found failed, drifted or blocked, with the
  host's finish time, for the fleet's event queries without reading a report.

Retention (``[server] retention``) is ``retain``, run by ``datum serve`` at start and every
``RETAIN_EVERY`` off the request path (never by an intake). On PostgreSQL the host rows and the events are
partitioned by day of receipt (``datum.store.partitions``): retention makes the days ahead, drops whole
days that ended before its bound, and deletes in batches only what the default partition holds. On
SQLite it deletes in batches of the oldest rows by receipt, each batch one short transaction (an index
range on ``(subject, at)``, so its cost is the rows it drops). ``pass_reports`` is batched on both.

Listings are newest first by the time the host finished the pass (what a person asks about: "last
Tuesday" is when web1 ran, not when a queued report reached the server), then by row id, and page by
keyset on that pair: a page never skips or repeats a row whatever is written meanwhile.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from datum.core.passcontent import events_of, restored
from datum.store.engine import Store
from datum.store.partitions import HISTORY, ahead, day_start, drop_days, make_days, partitioned
from datum.store.runs import store_now
from datum.store.schema import pass_events as ev
from datum.store.schema import pass_history as ph
from datum.store.schema import pass_reports as pr
from datum.store.types import insert_for, json_value, param

HOST = "host"  # pass_history's subject of a host pass (datum.store.history.HOST)
BATCH = 1000  # rows a retention batch drops in one transaction


# What the archive keeps of one host pass beside its ``pass_history`` row, as statements both stores run: in turn
# on SQLite (``datum.store.history.record_steps``), as CTEs of the intake's one statement on PostgreSQL
# (``datum.store.hosts``). Their bound values: ``archive_params`` and ``datum.store.history.host_pass_params``.

def kept_report(dialect: str, at: Any) -> Any:
    """The pass's report kept once by its digest, received at ``at``: written unless one with its digest is kept
    already, whose ``last_seen`` then moves to ``at``."""
    chosen = sa.select(
        param("digest", pr.c.digest.type).label("digest"), param("host", pr.c.host.type).label("host"),
        json_value(param("report", sa.Text), dialect).label("report"), at.label("last_seen"),
    ).where(sa.true())  # SQLite reads ON CONFLICT after a SELECT without WHERE as a join's ON
    stmt = insert_for(dialect)(pr).from_select(["digest", "host", "report", "last_seen"], chosen)
    return stmt.on_conflict_do_update(index_elements=[pr.c.digest], set_={"last_seen": stmt.excluded.last_seen})


_EVENT_COLUMNS = ("resource", "type", "action", "state", "changed", "reason")


def _events(dialect: str) -> tuple[Any, list[Any]]:
    """The pass's events (``p_events``: ``datum.core.passcontent.events_of`` as JSON text) as rows: the table
    and its columns in ``_EVENT_COLUMNS``' order."""
    given = param("events", sa.Text)
    if dialect == "postgresql":
        rows = sa.func.json_to_recordset(sa.cast(given, sa.JSON)).table_valued(
            *(sa.column(c, sa.Boolean if c == "changed" else sa.Text) for c in _EVENT_COLUMNS)
        ).render_derived(name="e", with_types=True)
        return rows, [rows.c[c] for c in _EVENT_COLUMNS]
    rows = sa.func.json_each(given).table_valued("value").alias("e")
    return rows, [sa.type_coerce(sa.func.json_extract(rows.c.value, f"$.{c}"), ev.c[c].type) for c in _EVENT_COLUMNS]


def added_events(dialect: str, row: Any, at: Any, source: Any = None) -> Any:
    """One ``pass_events`` row per event of the pass (``row``: its ``pass_history`` row's id), with the host's
    finish time (the receipt, ``at``, when the report says none); ``source`` is what ``row`` and ``at`` are read
    from, when not bound values (the intake's ``recorded``)."""
    rows, columns = _events(dialect)
    if source is not None:
        rows = rows.join(source, sa.true())
    chosen = sa.select(
        row.label("pass_row"), param("host", ev.c.host.type).label("host"),
        param("pass_id", ev.c.pass_id.type).label("pass_id"),
        sa.func.coalesce(param("finished_at", ev.c.finished_at.type), at).label("finished_at"),
        at.label("received_at"), *(c.label(n) for c, n in zip(columns, _EVENT_COLUMNS, strict=True)),
    ).select_from(rows)
    return sa.insert(ev).from_select(["pass_row", "host", "pass_id", "finished_at", "received_at", *_EVENT_COLUMNS], chosen)


def archive_params(report: Mapping[str, Any], text: str | None = None) -> dict[str, Any]:
    """The bound values ``kept_report`` and ``added_events`` add to the history row's: the report as JSON text
    (``text`` when the caller has it) and its events."""
    return {"p_report": text if text is not None else json.dumps(report), "p_events": json.dumps(events_of(report))}


# Reads.

@dataclass(frozen=True)
class After:
    """A keyset position: the last row of the previous page (its finish time and id); in the fleet's events,
    ``rollout`` when that row was a rollout's transition (``datum.fleet.history.events_page``)."""

    finished_at: datetime
    id: int
    rollout: bool = False


def _before(finished: Any, row_id: Any, after: After | None) -> Any:
    if after is None:
        return sa.true()
    at = sa.literal(after.finished_at, ph.c.finished_at.type)
    return sa.or_(finished < at, sa.and_(finished == at, row_id < after.id))


def _window(column: Any, since: datetime | None, until: datetime | None) -> list[Any]:
    out = []
    if since is not None:
        out.append(column >= sa.literal(since, ph.c.finished_at.type))
    if until is not None:
        out.append(column < sa.literal(until, ph.c.finished_at.type))
    return out


_PASS_COLUMNS = [
    ph.c.id, ph.c.name, ph.c.pass_id, ph.c.seq, ph.c.outcome, ph.c.reason, ph.c.completed, ph.c.counts,
    ph.c.drift, ph.c.started_at, ph.c.finished_at, ph.c.duration_seconds, ph.c.at, ph.c.digest, ph.c.older,
]


def _pass_row(r: Any) -> dict[str, Any]:
    return {
        "id": int(r["id"]),
        "host": r["name"],
        "passId": r["pass_id"],
        "seq": r["seq"],
        "state": r["outcome"],
        "reason": r["reason"],
        "completed": bool(r["completed"]),
        "counts": {str(k): int(v) for k, v in dict(r["counts"] or {}).items()},
        "attention": int(r["drift"] or 0),
        "startedAt": r["started_at"],
        "finishedAt": r["finished_at"] or r["at"],
        "durationSeconds": r["duration_seconds"],
        "receivedAt": r["at"],
        "digest": r["digest"],
        "older": bool(r["older"]),
    }


def host_passes(
    store: Store, host: str, *, since: datetime | None = None, until: datetime | None = None,
    state: str | None = None, after: After | None = None, limit: int,
) -> list[dict[str, Any]]:
    """Up to ``limit`` passes of ``host``, newest finish first, after ``after``; finished in [since, until)
    and of host ``state`` when given. No report is read."""
    query = sa.select(*_PASS_COLUMNS).where(
        ph.c.subject == HOST, ph.c.name == host, _before(ph.c.finished_at, ph.c.id, after),
        *_window(ph.c.finished_at, since, until),
    )
    if state is not None:
        query = query.where(ph.c.outcome == state)
    query = query.order_by(ph.c.finished_at.desc(), ph.c.id.desc()).limit(limit)
    with store.connect() as conn:
        return [_pass_row(r) for r in conn.execute(query).mappings()]


def _report_of(raw: Any) -> Any:
    if isinstance(raw, bytes | bytearray | memoryview):
        raw = bytes(raw).decode("utf-8", "replace")
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return None
    return raw


def one_pass(store: Store, host: str, which: str) -> dict[str, Any] | None:
    """One pass of ``host`` by its ``passId``, or by its archive id (digits): its row with ``report``, the
    whole report (the kept copy of its digest with the pass's own times and ids); None when not kept.
    ``report`` is None (and ``unreadable`` says why) when the kept copy is gone or not an object."""
    query = sa.select(*_PASS_COLUMNS).where(ph.c.subject == HOST, ph.c.name == host)
    by_number = which.isascii() and which.isdigit() and len(which) < 19  # "²" is a digit to str, not to int
    query = query.where(ph.c.id == int(which)) if by_number else query.where(ph.c.pass_id == which)
    with store.connect() as conn:
        r = conn.execute(query.order_by(ph.c.id.desc()).limit(1)).mappings().first()
        if r is None:
            return None
        raw = conn.execute(
            sa.select(sa.type_coerce(pr.c.report, sa.Text)).where(pr.c.digest == r["digest"])
        ).scalar() if r["digest"] else None
        events = conn.execute(
            sa.select(ev.c.resource, ev.c.type, ev.c.action, ev.c.state, ev.c.changed, ev.c.reason)
            .where(ev.c.pass_row == r["id"]).order_by(ev.c.id)
        ).mappings().all()
    row = _pass_row(r)
    kept = _report_of(raw)
    if isinstance(kept, dict):
        own = {"passId": row["passId"], "seq": row["seq"], "durationSeconds": row["durationSeconds"],
               "startedAt": _iso(row["startedAt"]), "finishedAt": _iso(r["finished_at"])}
        row["report"] = restored(kept, own)
    else:
        row["report"] = None
        row["unreadable"] = "the report of this pass is not kept (a pass recorded before every pass was kept)"
    row["events"] = [dict(e) for e in events]
    return row


def kept_reports(store: Store, digests: set[str]) -> dict[str, Any]:
    """The kept reports of ``digests`` (a page's passes share few), parsed; one that does not parse is None."""
    if not digests:
        return {}
    query = sa.select(pr.c.digest, sa.type_coerce(pr.c.report, sa.Text)).where(pr.c.digest.in_(sorted(digests)))
    with store.connect() as conn:
        return {d: _report_of(raw) for d, raw in conn.execute(query)}


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def fleet_events(
    store: Store, *, since: datetime | None = None, until: datetime | None = None, host: str | None = None,
    resource: str | None = None, type: str | None = None, action: str | None = None, state: str | None = None,
    after: After | None = None, limit: int, groups: frozenset[str] | None = None,
) -> list[dict[str, Any]]:
    """Up to ``limit`` events across the fleet, newest finish first, after ``after``, each filter exact; only the
    events of ``groups``' hosts when given (a token scoped to host groups)."""
    from datum.store.scope import hosts_of

    query = sa.select(
        ev.c.id, ev.c.host, ev.c.pass_row, ev.c.pass_id, ev.c.finished_at, ev.c.received_at, ev.c.resource,
        ev.c.type, ev.c.action, ev.c.state, ev.c.changed, ev.c.reason,
    ).where(_before(ev.c.finished_at, ev.c.id, after), *_window(ev.c.finished_at, since, until))
    for column, value in ((ev.c.host, host), (ev.c.resource, resource), (ev.c.type, type), (ev.c.action, action),
                          (ev.c.state, state)):
        if value is not None:
            query = query.where(column == value)
    if groups is not None:
        query = query.where(hosts_of(ev.c.host, groups))
    query = query.order_by(ev.c.finished_at.desc(), ev.c.id.desc()).limit(limit)
    with store.connect() as conn:
        rows = conn.execute(query).mappings().all()
    return [
        {"id": int(r["id"]), "host": r["host"], "pass": str(r["pass_id"] or r["pass_row"]), "passId": r["pass_id"],
         "finishedAt": r["finished_at"], "receivedAt": r["received_at"], "resource": r["resource"],
         "type": r["type"], "action": r["action"], "state": r["state"], "changed": bool(r["changed"]),
         "reason": r["reason"]}
        for r in rows
    ]


# Retention.

def retain(store: Store, keep: timedelta, *, batch: int = BATCH) -> int:
    """``prune_passes`` of what was received more than ``keep`` ago by the store's clock, after making the
    day partitions of today and the days ahead (PostgreSQL): how many passes went."""
    with store.begin() as conn:
        now = store_now(conn)
        make_days(conn, ahead(now.astimezone(UTC).date()))
    return prune_passes(store, now - keep, batch=batch)


def prune_passes(store: Store, before: datetime, *, batch: int = BATCH) -> int:
    """Drop every host pass received before ``before``, with its events, then every kept report no pass
    received since had. How many passes went.

    On PostgreSQL a day partition goes whole once its day ended before ``before`` (one ``DROP TABLE``
    each: a pass may outlive ``before`` by up to a day), and only the default partitions' rows are deleted
    row-wise. Rows are deleted in batches of ``batch``, each its own transaction. A report's ``last_seen``
    is the receipt of the newest pass with its digest, so a report still named by a pass left is never
    dropped.
    """
    gone, reports_before = 0, before
    rows: Any = ph  # the table whose rows are deleted: all of pass_history, or its default partition
    with store.begin() as conn:
        if partitioned(conn):
            gone, _ = drop_days(conn, before)
            rows = sa.table(HISTORY.default, sa.column("id"), sa.column("subject"), sa.column("at", ph.c.at.type))
            # The passes of before's own day are kept whole: so are the reports they name.
            reports_before = day_start(before)
    at = sa.literal(before, ph.c.at.type)
    while True:
        with store.begin() as conn:
            ids = conn.execute(
                sa.select(rows.c.id).where(rows.c.subject == HOST, rows.c.at < at).order_by(rows.c.at).limit(batch)
            ).scalars().all()
            if ids:
                conn.execute(sa.delete(ev).where(ev.c.pass_row.in_(ids)))
                conn.execute(sa.delete(ph).where(ph.c.subject == HOST, ph.c.id.in_(ids)))
        gone += len(ids)
        if len(ids) < batch:
            break
    while True:
        with store.begin() as conn:
            digests = conn.execute(
                sa.select(pr.c.digest).where(pr.c.last_seen < sa.literal(reports_before, pr.c.last_seen.type)).limit(batch)
            ).scalars().all()
            if digests:
                conn.execute(sa.delete(pr).where(pr.c.digest.in_(digests)))
        if len(digests) < batch:
            break
    return gone

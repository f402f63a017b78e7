"""Pass history: one row per executed reconciler pass and per stored host pass, kept ``[server] history`` long.

What the page draws its strips from ("failing since Tuesday"). A row is
proportional to what diverged, never to what exists:

- ``outcome`` (the reconciler's health, or the host state), ``completed``,
  ``drift``, ``blocked`` and ``counts`` (items by reason, or a host's
  resources by state): a handful of numbers whatever the size of the fleet;
- ``items``: the diverged items' reasons, grouped ``{reason: [kind/id, ...]}``,
  only for the items the pass retained (a reconciler's ``driftCap``), and only
  when they differ from the last row that stored them (or that row is
  ``KEYFRAME`` rows back): NULL means "the same as before". A million items
  stuck the same way for a week cost one map, not one per pass.

A pass that could not complete stores no items (NULL with ``completed``
false): what it saw is unknown. A host pass older than the host's latest (its
``seq`` lower: two agents reporting one host, a report sent again after a lost
answer) does not change the host's state but is kept here all the same, where
it arrived, once (``record_older_host_pass``, by its ``passId``), flagged ``older``.

A host row is also the pass archive's record of that pass (issue 23: every pass kept, ``datum.store.passes``):
the times the host measured, its ``seq``, reason and the digest of its report, kept once in ``pass_reports``.
Reconciler rows older than ``[server] history`` are pruned by their writer, in the writer's transaction;
host rows are kept ``[server] retention`` and dropped in bulk off the request path
(``datum.store.passes.prune_passes``). ``at`` is the writer's clock (the reconciler's tick; the server's
receipt of a host pass), so rows of one subject are in order of arrival.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from datum.core.hostsummary import count_states, needs_attention, resources_of
from datum.core.passcontent import content_digest
from datum.store.engine import Store
from datum.store.passes import HOST, added_events, archive_params, kept_report
from datum.store.runs import store_now
from datum.store.schema import pass_history as t
from datum.store.types import json_value, param, same_json

RECONCILER = "reconciler"
STRIP = 50  # passes per strip on the page
ITEMS = t.c["items"]  # not t.c.items: that is the column collection's own method
KEYFRAME = STRIP  # an items map is stored at least this often, so any STRIP rows can be read back


@dataclass(frozen=True)
class PassRow:
    """One pass as the page reads it; ``items`` maps an item to its reason, None when not observed."""

    at: datetime
    outcome: str
    completed: bool
    drift: int
    blocked: int
    counts: dict[str, int]
    items: dict[str, str] | None = field(default=None)


def _subject(subject: str, name: str) -> Any:
    return sa.and_(t.c.subject == subject, t.c.name == name)


def grouped(items: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """``[(item, reason), ...]`` as stored: ``{reason: [item, ...]}``, each list sorted."""
    out: dict[str, list[str]] = {}
    for item, reason in items:
        out.setdefault(reason, []).append(item)
    return {reason: sorted(ids) for reason, ids in sorted(out.items())}


def items_kept(subject: Any, name: Any, items: Any, dialect: str) -> Any:
    """The keyframe rule as SQL, one expression both stores run (``record``; the intake's statement,
    ``datum.store.hosts``): ``items`` (JSON text; NULL for a pass that saw none), or NULL when the last map
    ``subject``/``name`` stored is the same and fewer than ``KEYFRAME`` rows back (the row being written is the
    ``KEYFRAME``th)."""
    # short names: psycopg parses the intake's whole statement again on every call once it is over 4 KiB
    h, p = t.alias("h"), t.alias("p")
    last = (
        sa.select(h.c.id, h.c.at, h.c["items"]).where(h.c.subject == subject, h.c.name == name, h.c["items"].is_not(None))
        .order_by(h.c.at.desc(), h.c.id.desc()).limit(sa.literal_column("1")).cte("last")
    )
    since = (
        sa.select(sa.func.count()).select_from(p).join(last, sa.true())
        # after the last map in the order that picks it (at, then id): a row of the same millisecond before it is not
        .where(p.c.subject == subject, p.c.name == name,
               sa.or_(p.c.at > last.c.at, sa.and_(p.c.at == last.c.at, p.c.id > last.c.id)))
        .scalar_subquery()
    )
    same = same_json(sa.select(last.c["items"]).scalar_subquery(), items, dialect)
    return sa.case((sa.or_(sa.not_(same), since >= sa.literal_column(str(KEYFRAME - 1))), json_value(items, dialect)))  # NULL stays NULL


def record(
    conn: Connection,
    subject: str,
    name: str,
    at: datetime,
    *,
    outcome: str,
    completed: bool,
    drift: int = 0,
    blocked: int = 0,
    counts: Mapping[str, int] | None = None,
    items: dict[str, list[str]] | None = None,
    keep: timedelta | None = None,
    pass_id: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> int:
    """Append one pass of ``subject``/``name`` in the caller's transaction; prune what is older than ``keep``.

    ``items`` (see ``grouped``) only for a completed pass; None for one that could not complete. ``extra``:
    more columns (a host pass's times, seq, reason and digest). The new row's id.
    """
    given = json.dumps(items) if completed and items is not None else None
    dialect = conn.dialect.name
    row_id = conn.execute(
        sa.insert(t).values(
            subject=subject,
            name=name,
            at=at,
            outcome=outcome,
            completed=completed,
            drift=drift,
            blocked=blocked,
            counts=dict(counts or {}),
            items=items_kept(sa.literal(subject), sa.literal(name), sa.literal(given, sa.Text), dialect),
            pass_id=pass_id,
            **dict(extra or {}),
        ).returning(t.c.id)
    ).scalar_one()
    if keep is not None:
        prune(conn, subject, name, at - keep)
    return int(row_id)


def prune(conn: Connection, subject: str, name: str, before: datetime) -> int:
    """Delete the rows of one subject older than ``before``; how many went."""
    return int(conn.execute(sa.delete(t).where(_subject(subject, name), t.c.at < before)).rowcount or 0)


def recent(conn: Connection, subject: str, name: str, n: int = STRIP) -> list[PassRow]:
    """The last ``n`` passes of ``subject``/``name``, oldest first, each with its items read back."""
    rows = conn.execute(
        sa.select(t).where(_subject(subject, name)).order_by(t.c.at.desc(), t.c.id.desc()).limit(n)
    ).mappings().all()
    rows = list(reversed(rows))
    if not rows:
        return []
    first = rows[0]
    base: dict[str, list[str]] | None = None
    if _needs_base(first):
        found = conn.execute(
            sa.select(ITEMS).where(_subject(subject, name), ITEMS.is_not(None), _before(first["at"], first["id"]))
            .order_by(t.c.at.desc(), t.c.id.desc())
            .limit(1)
        ).first()
        base = found.items if found is not None else None
    return _strip(rows, base)


def recent_many(conn: Connection, subject: str, names: list[str], n: int = STRIP) -> dict[str, list[PassRow]]:
    """``recent`` of each of ``names`` (the page's hosts): on PostgreSQL in two statements whatever their
    number (a ``LATERAL`` read of each one's last ``n`` rows through the (subject, name, at) index, then of the
    items each strip starts from), where a query per name was a round trip per host on every page load.
    SQLite answers in process: a query per name there costs no round trip."""
    if conn.dialect.name != "postgresql" or not names:
        return {name: recent(conn, subject, name, n) for name in names}
    wanted = sa.values(sa.column("name", sa.String), name="wanted").data([(name,) for name in dict.fromkeys(names)])
    last = (
        sa.select(t).where(t.c.subject == subject, t.c.name == wanted.c.name)
        .order_by(t.c.at.desc(), t.c.id.desc()).limit(n).lateral("last")
    )
    by_name: dict[str, list[Any]] = {name: [] for name in names}
    for r in conn.execute(sa.select(last).select_from(wanted.join(last, sa.true()))).mappings():
        by_name[r["name"]].append(r)
    for rows in by_name.values():
        rows.sort(key=lambda r: (r["at"], r["id"]))
    starts = [(name, rows[0]["at"], rows[0]["id"]) for name, rows in by_name.items() if rows and _needs_base(rows[0])]
    bases: dict[str, Any] = {}
    if starts:
        first = sa.values(
            sa.column("name", sa.String), sa.column("at", t.c.at.type), sa.column("id", t.c.id.type), name="first"
        ).data(starts)
        base = (
            sa.select(ITEMS.label("items")).where(
                t.c.subject == subject, t.c.name == first.c.name, ITEMS.is_not(None),
                _before(first.c.at, first.c.id),
            ).order_by(t.c.at.desc(), t.c.id.desc()).limit(1).lateral("base")
        )
        bases = dict(conn.execute(sa.select(first.c.name, base.c["items"]).select_from(first.join(base, sa.true()))).all())
    return {name: _strip(rows, bases.get(name)) if rows else [] for name, rows in by_name.items()}


def _needs_base(first: Mapping[str, Any]) -> bool:
    """Whether a strip's oldest row needs the items of an older row to be read back (it stored none)."""
    return bool(first["completed"]) and first["items"] is None


def _before(at: Any, id_: Any) -> Any:
    """Rows older than the one at (``at``, ``id_``): values, or a joined row's columns."""
    return sa.or_(t.c.at < at, sa.and_(t.c.at == at, t.c.id < id_))


def _strip(rows: list[Any], base: dict[str, list[str]] | None) -> list[PassRow]:
    """``rows`` (oldest first) as ``PassRow``s, each completed one's items read back from the last row that
    stored them (``base`` for those before the first that does)."""
    out = []
    for r in rows:
        if r["items"] is not None:
            base = r["items"]
        items = None
        if r["completed"] and base is not None:
            items = {item: reason for reason, ids in base.items() for item in ids}
        out.append(
            PassRow(
                at=r["at"],
                outcome=r["outcome"],
                completed=r["completed"],
                drift=r["drift"],
                blocked=r["blocked"],
                counts=dict(r["counts"] or {}),
                items=items,
            )
        )
    return out


def record_reconciler_pass(
    conn: Connection, name: str, values: Mapping[str, Any], keep: timedelta | None
) -> None:
    """The history row of one executed pass, from the values the runner gives ``record_executed``."""
    completed = bool(values.get("completed"))
    items = None
    if completed:
        items = grouped((f"{i['kind']}/{i['id']}", str(i["reason"])) for i in values.get("items") or [])
    record(
        conn,
        RECONCILER,
        name,
        values["last_ran_at"],
        outcome=str(values["health"]),
        completed=completed,
        drift=int(values.get("drift") or 0),
        blocked=int(values.get("blocked") or 0),
        counts=values.get("reasons") or {},
        items=items,
        keep=keep,
    )


def host_pass_values(report: Mapping[str, Any]) -> dict[str, Any]:
    """``record``'s keywords for one host pass (a ``PassReport`` in its JSON form): outcome, counts, items,
    and in ``extra`` what the pass archive keeps of it (``pass_columns``)."""
    resources = resources_of(report)
    attention = [(str(r.get("id")), str(r.get("state"))) for r in resources if needs_attention(r)]
    return {
        "outcome": str(report.get("state")),
        "completed": not report.get("incomplete"),
        "drift": len(attention),
        "counts": count_states(resources),
        "items": grouped(attention),
        "pass_id": _pass_id(report),
        "extra": pass_columns(report),
    }


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def pass_columns(report: Mapping[str, Any], *, older: bool = False) -> dict[str, Any]:
    """The columns of a host pass row beyond the strip's: the host's times, seq, reason, report digest."""
    seq = report.get("seq")
    duration = report.get("durationSeconds")
    reason = report.get("reason")
    return {
        "started_at": _time(report.get("startedAt")),
        "finished_at": _time(report.get("finishedAt")),
        "duration_seconds": float(duration) if isinstance(duration, int | float) and not isinstance(duration, bool) else None,
        "seq": seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
        "reason": reason if isinstance(reason, str) else None,
        "digest": content_digest(report),
        "older": older,
    }


def _pass_id(report: Mapping[str, Any]) -> str | None:
    pass_id = report.get("passId")
    return pass_id[:64] if isinstance(pass_id, str) else None


def host_pass_params(host: str, report: Mapping[str, Any], *, text: str | None = None, older: bool = False) -> dict[str, Any]:
    """The bound values of a host pass's history row (``host_pass_row``) and of what the archive keeps beside it
    (``datum.store.passes.kept_report``, ``added_events``): one truth for both stores. ``text`` is ``report`` as
    JSON text when the caller has it already."""
    passed = host_pass_values(report)
    extra = passed["extra"]
    return {
        "p_host": host,
        "p_outcome": passed["outcome"],
        "p_completed": passed["completed"],
        "p_drift": passed["drift"],
        "p_counts": json.dumps(passed["counts"]),
        "p_items": json.dumps(passed["items"]) if passed["completed"] else None,
        "p_pass_id": passed["pass_id"],
        **{f"p_{c}": extra[c] for c in _HOST_PASS_EXTRA},
        "p_older": older,
        **archive_params(report, text),
    }


_HOST_PASS_EXTRA = ("started_at", "finished_at", "duration_seconds", "seq", "reason", "digest")


def host_pass_row(dialect: str, at: Any) -> Any:
    """The ``pass_history`` row of one host pass received at ``at`` (the store's clock: a bound value, or the
    intake statement's ``up.now``), as one INSERT both stores run, returning its id and ``at``: its items under the keyframe
    rule (``items_kept``), its finish time the receipt when the report says none. Its values: ``host_pass_params``."""
    host = param("host", t.c.name.type)
    subject = sa.literal_column(f"'{HOST}'", t.c.subject.type)
    values = {
        "subject": subject,
        "name": host,
        "at": at,
        "outcome": param("outcome", t.c.outcome.type),
        "completed": param("completed", t.c.completed.type),
        "drift": param("drift", t.c.drift.type),
        "blocked": sa.literal_column("0", t.c.blocked.type),
        "counts": json_value(param("counts", sa.Text), dialect),
        "items": items_kept(subject, host, param("items", sa.Text), dialect),
        "pass_id": param("pass_id", t.c.pass_id.type),
        **{c: param(c, t.c[c].type) for c in _HOST_PASS_EXTRA if c != "finished_at"},
        "finished_at": sa.func.coalesce(param("finished_at", t.c.finished_at.type), at),
        "older": param("older", t.c.older.type),
    }
    chosen = sa.select(*(v.label(c) for c, v in values.items()))
    return sa.insert(t).from_select(list(values), chosen).returning(t.c.id, t.c.at)


@dataclass(frozen=True)
class HostPassSteps:
    """The statements that record a host pass, run in turn (SQLite; an older pass on either store): its row, its
    report kept once, its events. The intake's statement on PostgreSQL composes the same (``datum.store.hosts``)."""

    row: Any
    report: Any
    events: Any


@cache
def host_pass_steps(dialect: str) -> HostPassSteps:
    at = param("at", t.c.at.type)
    return HostPassSteps(host_pass_row(dialect, at), kept_report(dialect, at), added_events(dialect, param("row"), at))


def record_steps(conn: Connection, params: Mapping[str, Any]) -> int:
    """Run ``host_pass_steps`` with ``params`` (``host_pass_params`` and ``p_at``) in the caller's transaction: the
    row's id."""
    steps = host_pass_steps(conn.dialect.name)
    row_id = int(conn.execute(steps.row, params).one()[0])
    conn.execute(steps.report, params)
    if params["p_events"] != "[]":  # nothing to insert: spare the statement
        conn.execute(steps.events, {**params, "p_row": row_id})
    return row_id


def record_host_pass(
    conn: Connection, host: str, report: Mapping[str, Any], at: datetime, *, older: bool = False
) -> None:
    """The history row of one host pass (a ``PassReport`` in its JSON form), received at ``at``, with its
    report kept once by digest and its events (``datum.store.passes``). Host rows are not pruned here: the
    archive's retention drops them in bulk (``datum.store.passes.prune_passes``)."""
    record_steps(conn, {**host_pass_params(host, report, older=older), "p_at": at})


def record_older_host_pass(conn: Connection, host: str, report: Mapping[str, Any], at: datetime) -> bool:
    """``record_host_pass`` for a pass older than the host's latest, unless its ``passId`` is recorded
    already (or it has none: nothing tells it from the same pass sent again). Whether it was recorded."""
    pass_id = _pass_id(report)
    if pass_id is None:
        return False
    seen = conn.execute(
        sa.select(t.c.id).where(_subject(HOST, host), t.c.pass_id == pass_id).limit(1)
    ).first()
    if seen is not None:
        return False
    record_host_pass(conn, host, report, at, older=True)
    return True


def first_seen(conn: Connection, subject: str, name: str, streak: int) -> datetime | None:
    """When the completed pass ``streak - 1`` before the latest completed one ran: when an item with that
    streak (consecutive passes that saw it diverged) first diverged. A pass that could not complete saw no
    item, so it is not counted. None when history does not reach that far back (pruned, or older).
    """
    if streak < 1:
        return None
    return conn.execute(
        sa.select(t.c.at).where(_subject(subject, name), t.c.completed.is_(True)).order_by(t.c.at.desc(), t.c.id.desc()).offset(streak - 1).limit(1)
    ).scalar()


def record_host(store: Store, host: str, report: Mapping[str, Any]) -> None:
    """For report intake: the history row of a host pass just stored, received now (the store's clock)."""
    with store.begin() as conn:
        record_host_pass(conn, host, report, store_now(conn))


def first_seen_many(conn: Connection, subject: str, name: str, streaks: Iterable[int]) -> dict[int, datetime | None]:
    """``first_seen`` for many streaks in one query (the page asks for every item's)."""
    wanted = sorted({s for s in streaks if s >= 1})
    if not wanted:
        return {}
    times = conn.execute(
        sa.select(t.c.at)
        .where(_subject(subject, name), t.c.completed.is_(True))
        .order_by(t.c.at.desc(), t.c.id.desc())
        .limit(wanted[-1])
    ).scalars().all()
    return {s: times[s - 1] if s <= len(times) else None for s in wanted}

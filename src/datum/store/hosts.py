"""Host state across passes: the last pass report of every host the store knows."""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

import sqlalchemy as sa

from datum.core.budget import DEFAULT_GROUP, back_unhealthy
from datum.core.findings import ErrorCode, Problem
from datum.core.hostsummary import interval_of, summarize
from datum.core.vocab import HostState
from datum.store import audit
from datum.store import group_counts as by_group
from datum.store.engine import Store
from datum.store.history import (
    host_pass_params,
    host_pass_row,
    record_older_host_pass,
    record_steps,
)
from datum.store.leases import on_return, on_return_params, returned
from datum.store.passes import added_events, kept_report
from datum.store.runs import store_now
from datum.store.schema import hosts
from datum.store.scope import Groups, of_groups
from datum.store.status_counts import COMPACT_AT, compact, counts_table
from datum.store.types import ReadableTime, UTCDateTime, insert_for, json_value, param

log = logging.getLogger(__name__)


def _values(report: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
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
        "summary": summarize(report),
        "interval_seconds": interval_of(report),
    }
    values["revision"] = values["summary"].get("revision")
    return values, seq


def _clock(dialect: str) -> Any:
    """The store's clock as a column expression (``datum.store.runs.store_now`` without its own query)."""
    if dialect == "postgresql":
        return sa.func.clock_timestamp()
    return sa.func.strftime("%Y-%m-%d %H:%M:%f", "now")


def _as_utc(value: Any) -> datetime:
    if isinstance(value, str):
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Taken:
    """What became of one reported pass.

    ``outcome`` is ``"stored"``, ``"duplicate"`` or ``"older"``; ``row`` is the host's row as
    ``get_host`` reads it: the one just written (built from what was written, not read back)
    or, for a pass not stored, the one kept.
    """

    outcome: str
    row: dict[str, Any]


def take_pass(
    store: Store,
    host: str,
    report: dict[str, Any],
    *,
    history: bool = False,
    text: str | None = None,
    release_lease: bool = False,
    group: str | None = None,
) -> Taken:
    """Persist ``report`` (a ``PassReport`` in its JSON form) as ``host``'s latest pass, with its summary.

    A report with a ``seq`` (an agent's per-host sequence number) replaces the
    stored one only when it is newer: the same pass again is ``"duplicate"``,
    an older one ``"older"``; both leave the row alone. Otherwise it is
    ``"stored"``. The comparison and the write are one statement (an INSERT
    whose conflict updates only under the sequence rule), so two servers taking
    the same host's reports at once cannot put an older pass last. With
    ``history`` a stored pass also gets its history row (``store.history``: the pass archive's record of it,
    with its report kept once by digest and its events, ``store.passes``) in the same transaction, at the
    store's clock: on PostgreSQL in the same statement, so a stored pass costs one round trip. Nothing is
    pruned here: retention is ``store.passes.prune_passes``, off the request path.
    ``text`` is ``report`` as JSON text when the caller has it already. With ``history`` an older pass
    (not the same pass again) is still kept in the host's history, once, at its receipt
    (``store.history.record_older_host_pass``): it is not the host's state, and it is not lost.
    With ``release_lease`` a stored pass from a boot other than the one of the
    host's reboot lease frees that lease when the host is back converged and
    healthy (``datum.core.budget.back_unhealthy``; else the lease keeps why
    not: ``datum.store.leases.release_rebooted``), in the same transaction; on
    PostgreSQL with ``history`` in the same statement, so the intake's one
    round trip stays one. ``group`` is the host's group (``datum.fleet.reboots.intake_group``), written
    with the pass; None keeps the stored one (``default`` for a new host).
    A request's audit row (``datum.store.audit.PENDING``: the report's ``fleet:ReportPass``) is written with a
    stored pass in the same transaction: on PostgreSQL with ``history`` in the same statement (a CTE), on SQLite
    by ``Store.begin`` before the commit. A pass not stored leaves it to the answer (``audit.unchanged``).
    """
    values, seq = _values(report)
    params = _params(host, values, group, text if text is not None else json.dumps(report))
    if history:
        params.update(host_pass_params(host, report, text=params["p_h_report"]))
    if release_lease:
        params.update(on_return_params(host, values["boot_id"], back_unhealthy(report)))
    with store.one_writer(), store.begin() as conn:
        if history and store.dialect == "postgresql":
            if not release_lease:
                params.update(on_return_params(host, None, None))
            row = audit.carrying(conn)  # the request's audit row, when one is due: in the same statement
            if row is not None:
                params.update(row)
            now = conn.execute(_at_once(row is not None), params).scalar()
        else:  # the same rules in turn, each after the host row only when it was written
            now = conn.execute(_host_row(store.dialect), params).scalar()
            if now is not None and history:
                record_steps(conn, {**params, "p_at": _as_utc(now)})
            if now is not None and release_lease:
                returned(conn, params)
        if now is not None:
            return Taken("stored", {
                "host": host,
                "state": values["state"],
                "reason": values["reason"],
                "bootId": values["boot_id"],
                "finishedAt": values["finished_at"],
                "updatedAt": values["updated_at"],
                "report": report,
                "passId": values["pass_id"],
                "seq": seq,
            })
        r = conn.execute(sa.select(*_COLUMNS, _RAW).where(hosts.c.host == host)).mappings().first()
        if r is None:  # pragma: no cover - a conflict means the row is there
            raise RuntimeError(f"the pass of {host!r} was neither stored nor found")
        row = _row(r)
        audit.unchanged(conn)  # not the host's pass (answered 200, Datum-Pass): the audit row goes with the answer
        same = row["passId"] is not None and row["passId"] == report.get("passId")
        outcome = "duplicate" if same or row["seq"] == seq else "older"
        if outcome == "older" and history:
            record_older_host_pass(conn, host, report, store_now(conn))
    return Taken(outcome, row)


# Taking a pass is four rules, each one statement both stores run, written once as SQLAlchemy Core: the host row
# under the sequence rule (``host_row``, here), the pass's history row with its items under the keyframe rule
# (``datum.store.history.host_pass_row``), what the archive keeps beside it (``datum.store.passes.kept_report``,
# ``added_events``) and the host's reboot lease on its return (``datum.store.leases.on_return``). SQLite runs them
# in turn in one transaction (``take_pass``), each after the host row only when it was written; PostgreSQL runs
# them as one statement (``_at_once``), each a CTE reading ``up`` (the host row written, and the store's clock):
# one round trip. Their bound values, the same on both: ``_params`` and the modules' own.
_HOST_COLUMNS = (
    "state", "reason", "boot_id", "finished_at", "updated_at", "report", "pass_id", "seq", "summary",
    "interval_seconds", "revision",
)
_JSON_COLUMNS = {"report", "summary"}


def host_row(dialect: str) -> Any:
    """The host row's INSERT ... ON CONFLICT DO UPDATE under the sequence rule, returning the store's clock
    (``now``; no row when the pass was not newer): a report with a ``seq`` replaces the stored one only when the
    stored one has none or a lower one. The group is written only when known (``p_group``; else the stored one
    kept, ``default`` for a new host)."""
    given = {c: json_value(param(f"h_{c}", sa.Text), dialect) if c in _JSON_COLUMNS else param(f"h_{c}", hosts.c[c].type)
             for c in _HOST_COLUMNS}
    group = param("group", hosts.c.group_name.type)
    stmt = insert_for(dialect)(hosts).values(
        host=param("host", hosts.c.host.type), group_name=sa.func.coalesce(group, sa.literal_column(f"'{DEFAULT_GROUP}'")), **given
    )
    seq = param("h_seq", hosts.c.seq.type)
    return stmt.on_conflict_do_update(
        index_elements=[hosts.c.host],
        set_={**{c: stmt.excluded[c] for c in _HOST_COLUMNS}, "group_name": sa.func.coalesce(group, hosts.c.group_name)},
        where=sa.or_(seq.is_(None), hosts.c.seq.is_(None), hosts.c.seq < seq),
    ).returning(_clock(dialect).label("now"))


def _params(host: str, values: dict[str, Any], group: str | None, text: str) -> dict[str, Any]:
    """``host_row``'s bound values: the host, its row's columns (``_values``; the report as ``text``), its group."""
    row = {f"p_h_{c}": json.dumps(values[c]) if c in _JSON_COLUMNS else values[c] for c in _HOST_COLUMNS if c != "report"}
    return {"p_host": host, **row, "p_h_report": text, "p_group": group}


_host_row = cache(host_row)


@cache
def _at_once(audited: bool = False) -> Any:
    """PostgreSQL: the four rules as one statement, each after the host row only when it was written (``up``);
    ``audited``: with the request's audit row too (``datum.store.audit.carried``, its values ``carrying``'s),
    written only with the pass, so the report and its row commit together or not at all, in one round trip."""
    dialect = "postgresql"
    up = host_row(dialect).cte("up")
    stored = sa.exists(sa.select(up.c.now))
    recorded = host_pass_row(dialect, up.c.now).cte("recorded")
    released, marked = on_return(stored)
    ctes = [
        recorded,
        kept_report(dialect, up.c.now).cte("kept"),
        added_events(dialect, recorded.c.id, recorded.c.at, recorded).cte("evented"),
        released.cte("released"),
        marked.cte("marked"),
    ]
    if audited:
        ctes.append(audit.carried(dialect, stored).cte("audited"))
    return sa.select(up.c.now).add_cte(*ctes)


def record_pass(store: Store, host: str, report: dict[str, Any]) -> str:
    """``take_pass`` for who needs only the outcome: ``"stored"``, ``"duplicate"`` or ``"older"``."""
    return take_pass(store, host, report).outcome


# The times as the store holds them: on SQLite, text a hand edit may have left unreadable. Such a time
# reads None (that host's time unknown), so one bad row never fails a listing, a host or a scrape.
FINISHED_AT = sa.type_coerce(hosts.c.finished_at, ReadableTime).label("finished_at")
UPDATED_AT = sa.type_coerce(hosts.c.updated_at, ReadableTime).label("updated_at")
_TIMES = {"finished_at": FINISHED_AT, "updated_at": UPDATED_AT}
# The report column as the store holds it: text that may not be JSON at all (a torn write, a
# hand edit). It is parsed here, row by row, so one bad row makes one host unknown, not the list fail.
_COLUMNS = [_TIMES.get(c.name, c) for c in hosts.c if c.name not in ("report", "summary")]
_RAW = sa.type_coerce(hosts.c.report, sa.Text).label("report")


def _report(raw: Any) -> tuple[Any, str | None]:
    """The stored report (or summary) and, when it cannot be read, why."""
    if raw is None or isinstance(raw, dict | list):
        return raw, None
    if isinstance(raw, bytes | bytearray | memoryview):
        raw = bytes(raw).decode("utf-8", "replace")
    try:
        return json.loads(raw, parse_constant=_not_json), None
    except ValueError as exc:
        return None, f"not valid JSON ({exc})"


def _not_json(name: str) -> Any:
    """``NaN``, ``Infinity``, ``-Infinity``: Python's json reads them, JSON has no such values (intake refuses
    them; a hand edit or another writer put them there): the stored report cannot be read."""
    raise ValueError(f"{name} is not a JSON value")


def _named(r: Any) -> dict[str, Any]:
    """The columns of a host row every read gives, by their API names."""
    return {
        "host": r["host"],
        "state": r["state"],
        "reason": r["reason"],
        "bootId": r["boot_id"],
        "finishedAt": r["finished_at"],
        "updatedAt": r["updated_at"],
        "passId": r["pass_id"],
        "seq": r["seq"],
    }


def _row(r: Any) -> dict[str, Any]:
    report, unreadable = _report(r["report"])
    row = {**_named(r), "report": report}
    if unreadable:
        row["unreadable"] = unreadable
    return row


def unknown_host(host: str) -> Problem:
    """``NOT_FOUND`` for a host the store has never heard of: what every read of one host answers."""
    return Problem.one(ErrorCode.NOT_FOUND, f"no host named {host!r} has reported a pass")


def known(store: Store, host: str) -> bool:
    """Whether the store has heard of ``host`` (a primary-key look, no report read)."""
    with store.connect() as conn:
        return conn.execute(sa.select(hosts.c.host).where(hosts.c.host == host)).first() is not None


def get_host(store: Store, host: str) -> dict[str, Any] | None:
    """One host's latest state and pass report, or None when the store has never heard of it.

    A report that is not JSON comes back as None with ``unreadable`` saying why.
    """
    with store.connect() as conn:
        r = conn.execute(sa.select(*_COLUMNS, _RAW).where(hosts.c.host == host)).mappings().first()
    return _row(r) if r else None


_HOST_STATES = [s.value for s in HostState]


def silent(dialect: str, multiple: float, now: datetime) -> Any:
    """The stale rule (``datum.fleet.stale``) as SQL: the last report, of an agent with an interval, is
    older than ``multiple`` of its intervals at ``now``."""
    t = hosts
    at = sa.literal(now, UTCDateTime)
    if dialect == "postgresql":
        age = sa.func.extract("epoch", at - t.c.finished_at)
    else:
        age = (sa.func.julianday(at) - sa.func.julianday(t.c.finished_at)) * 86400.0
    overdue = sa.and_(t.c.interval_seconds > 0, t.c.finished_at.is_not(None), age > t.c.interval_seconds * multiple)
    return sa.func.coalesce(overdue, sa.false())  # never NULL: NOT of it keeps the hosts without an interval


def _effective(stale_now: Any) -> Any:
    """The state a host reads: ``unknown`` when stale or when the stored state is not a host state."""
    return sa.case((stale_now, HostState.UNKNOWN.value), (hosts.c.state.in_(_HOST_STATES), hosts.c.state),
                   else_=HostState.UNKNOWN.value)


def host_state_at(dialect: str, multiple: float, now: datetime) -> Any:
    """The state each host reads at ``now`` as a column expression (stale ones ``unknown``), for grouped reads."""
    return _effective(silent(dialect, multiple, now))


def host_counts(store: Store, multiple: float, now: datetime) -> dict[str, int]:
    """Every host by the state it reads at ``now`` (stale ones ``unknown``), without reading every host.

    The database keeps the count of each stored state (``hosts_status_counts``, migration
    0014_host_counts); the stale hosts, found through ``finished_at`` (``stale_hosts``), move from their
    stored state to ``unknown``, as does a stored state that is not a host state.
    """
    return {state: n for (state,), n in kept_counts(store, multiple, now).items()}


REVISION_COUNTS = "hosts_revision_status_counts"  # migration 0017_revision_counts
BY_REVISION = {"revision": "revision"}


def revision_counts(store: Store, multiple: float, now: datetime) -> dict[tuple[str | None, str], int]:
    """Every host by the revision its last pass ran (None: it names none) and the state it reads at ``now``:
    ``host_counts`` per revision, from the counts the database keeps (``hosts_revision_status_counts``)."""
    found = kept_counts(store, multiple, now, REVISION_COUNTS, BY_REVISION)
    return {(revision or None, state): n for (revision, state), n in found.items()}


def kept_counts(
    store: Store, multiple: float, now: datetime, counts: str | None = None, by: dict[str, str] | None = None,
) -> dict[tuple[str, ...], int]:
    """The hosts by the state they read at ``now``, and by ``by``'s columns before it, from a count the database
    keeps (``counts``; the states' own by default; ``datum.store.status_counts``): each key is ``by``'s values
    (NULL as ``''``) then the state. The stale hosts, found through ``finished_at`` (``stale_hosts``), move
    from their stored state to ``unknown``, as does a stored state that is not a host state."""
    by = by or {}
    kept = counts_table(hosts.name, counts, by)
    keyed = [kept.c[k] for k in by]
    own = [sa.func.coalesce(hosts.c[column], "") for column in by.values()]
    unknown = HostState.UNKNOWN.value
    with store.connect() as conn:
        logged = 0
        found: Counter[tuple[str, ...]] = Counter()
        for *key, state, n, entries in conn.execute(
            sa.select(*keyed, kept.c.status, sa.func.sum(kept.c.n), sa.func.count()).group_by(*keyed, kept.c.status)
        ):
            logged += int(entries)
            found[(*map(str, key), _readable(str(state)))] += int(n)
        late = stale_hosts(conn, multiple, now)
        if late is not None:
            for *key, state, n in conn.execute(
                sa.select(*own, hosts.c.state, sa.func.count()).where(late).group_by(*own, hosts.c.state)
            ):
                found[(*map(str, key), _readable(str(state)))] -= int(n)
                found[(*map(str, key), unknown)] += int(n)
    if logged > COMPACT_AT:
        compact_counts(store, counts, by)
    return {key: n for key, n in found.items() if n > 0}


def group_counts(store: Store, multiple: float, now: datetime) -> dict[tuple[str, str], int]:
    """Every host by (group, the state it reads at ``now``), without reading every host: ``host_counts`` by group,
    from the count the database keeps (``hosts_group_status_counts``, migration 0018_host_groups)."""
    found = kept_counts(store, multiple, now, by_group.TABLE, by_group.BY)
    return {(group, state): n for (group, state), n in found.items()}


def _readable(state: str) -> str:
    """The state a stored one reads as: itself, or ``unknown`` when it is not a host state."""
    return state if state in _HOST_STATES else HostState.UNKNOWN.value


def stale_hosts(conn: sa.Connection, multiple: float, now: datetime) -> Any:
    """The stale rule (``silent``) through the ``finished_at`` index, or None when no host can be stale.

    A host cannot be stale before ``multiple`` of the fleet's shortest agent interval has passed since
    its last pass finished: only the hosts that finished before that are weighed, one index range.
    """
    shortest = conn.execute(
        sa.select(sa.func.min(hosts.c.interval_seconds)).where(hosts.c.interval_seconds > 0)
    ).scalar()
    if shortest is None:
        return None
    try:
        bound = now - timedelta(seconds=float(shortest) * multiple)
    except OverflowError:  # the shortest interval reaches past the calendar's start: none can be stale yet
        return None
    return sa.and_(hosts.c.finished_at < bound, silent(conn.dialect.name, multiple, now))


def compact_counts(store: Store, counts: str | None = None, by: dict[str, str] | None = None) -> None:
    """Fold a count log of ``hosts`` (PostgreSQL; ``counts``, by ``by``'s columns: which, the states' by default);
    the counts are exact either way, only reads are slower."""
    if store.dialect != "postgresql":
        return
    try:
        compact(store.engine, hosts.name, counts, by or ())
    except sa.exc.SQLAlchemyError as exc:
        log.warning("could not fold the host count log: %s", exc)


def host_page(
    store: Store, multiple: float, now: datetime, *, state: str | None = None, after: str | None = None, limit: int,
    groups: Groups = None,
) -> list[dict[str, Any]]:
    """Up to ``limit`` hosts by name after ``after`` (keyset), only those reading ``state`` when given, only those
    of ``groups`` when given.

    Each row is the host's summary columns with the state it reads at ``now`` (``state``) and, when the
    stale rule made it ``unknown``, ``stale`` True and the stored state as ``reported``. No report is read.
    """
    t = hosts
    stale_now = silent(store.dialect, multiple, now)
    query = sa.select(
        t.c.host, _effective(stale_now).label("effective"), t.c.state, t.c.reason, t.c.boot_id, FINISHED_AT,
        UPDATED_AT, t.c.pass_id, t.c.seq, _SUMMARY, t.c.interval_seconds, stale_now.label("stale"),
    )
    if state == HostState.UNKNOWN.value:
        query = query.where(_unknown(store, multiple, now))
    elif state is not None:  # the index on (state, host) serves it
        query = query.where(t.c.state == state, sa.not_(stale_now))
    if after is not None:
        query = query.where(t.c.host > after)
    if groups is not None:
        query = query.where(of_groups(groups))
    with store.connect() as conn:
        rows = conn.execute(query.order_by(t.c.host).limit(limit)).mappings().all()
    return [_summary_row(r) for r in rows]


def _unknown(store: Store, multiple: float, now: datetime) -> Any:
    """The hosts that read ``unknown``, each through an index: the stale ones (``stale_hosts``), those that said
    unknown, and those whose stored state is not a host state (named from the kept counts)."""
    kept = counts_table(hosts.name)
    with store.connect() as conn:
        odd = [s for s in conn.execute(sa.select(kept.c.status).distinct()).scalars() if s not in _HOST_STATES]
        late = stale_hosts(conn, multiple, now)
    said = [HostState.UNKNOWN.value, *odd]
    return hosts.c.state.in_(said) if late is None else sa.or_(hosts.c.state.in_(said), late)


_SUMMARY = sa.type_coerce(hosts.c.summary, sa.Text).label("summary")  # parsed row by row, as the report


def _summary_row(r: Any) -> dict[str, Any]:
    summary, unreadable = _report(r["summary"])
    row = {
        **_named(r),
        "state": r["effective"],
        "reported": r["state"],
        "stale": bool(r["stale"]),
        "summary": summary if isinstance(summary, dict) else None,
        "intervalSeconds": r["interval_seconds"],
    }
    if unreadable or (summary is not None and not isinstance(summary, dict)):
        row["unreadable"] = unreadable or "the stored summary is not an object"
    return row


@dataclass(frozen=True, slots=True)
class Sighting:
    """When the server last heard from one host, and the state it reads at ``now`` (stale ones ``unknown``)."""

    host: str
    state: str
    stale: bool
    finished_at: datetime | None  # the agent's clock: when its last pass finished
    received_at: datetime | None  # the server's clock: when that report was stored
    interval_seconds: float | None


def sightings(store: Store, multiple: float, now: datetime) -> list[Sighting]:
    """Every host the store has heard from, by name: no report or summary read (the ``hosts`` reconciler's actual state)."""
    stale_now = silent(store.dialect, multiple, now)
    query = sa.select(
        hosts.c.host, _effective(stale_now).label("effective"), stale_now.label("stale"), FINISHED_AT, UPDATED_AT,
        hosts.c.interval_seconds,
    ).order_by(hosts.c.host)
    with store.connect() as conn:
        rows = conn.execute(query).mappings().all()
    return [
        Sighting(r["host"], r["effective"], bool(r["stale"]), _maybe_utc(r["finished_at"]), _maybe_utc(r["updated_at"]),
                 r["interval_seconds"])
        for r in rows
    ]


def _maybe_utc(value: Any) -> datetime | None:
    return None if value is None else _as_utc(value)


def revoke_host_tokens(conn: sa.Connection, host: str) -> int:
    """Delete the tokens bound to ``host`` in the caller's transaction: how many. Every server refuses a
    deleted token within ``datum.api.front.tokens.RECHECK`` seconds; a token not bound to a host is not touched."""
    from datum.store.schema import tokens

    return int(conn.execute(sa.delete(tokens).where(tokens.c.host == host)).rowcount)

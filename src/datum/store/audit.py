"""The audit log: who did what, when, from where, and what Cedar said; one hash-chained row each.

Every audited act (a reboot lease taken or given back, a rollout paused,
resumed or aborted, a plugin's write, an agent's pass report, a host's enrollment
and session), every refusal (401, 403) and every act of the CLI on the store (a
token or a join token created, a token revoked, a reboot lease cleared, a rollout
commanded, a host approved, denied, revoked or forgotten) is one row of ``audit_log``.
A request that proves its caller itself (a host's key, a join token: no Cedar decision) has its row left pending
all the same, and the code that checks the proof says who it proved with ``fill`` (``join:<id>``, ``host:<name>``).

**In the change's transaction.** The HTTP front door (``datum.api.front.audit``)
leaves a ``Pending`` row in ``PENDING`` (a context variable: the request's
worker thread sees it) before the route runs; ``Store.begin`` writes it in the
first transaction of the request that commits having changed a row (``due``,
``wrote``), so a change is never stored without its row. Store code whose committed transaction is not the change
the request asked for (a rollout whose state forbids the command) says so with ``unchanged(conn)``: the row is
then written with the answer, after it, as a refusal's is. Anything else that acts on the store (a CLI command,
another route) writes its row itself with ``record(conn, entry)`` in its own transaction, or wraps its
transaction in ``acting(entry)``. A statement that writes the change in one round trip (the intake's on PostgreSQL) carries the row itself: it
takes the row's values from ``carrying(conn)`` and composes ``carried`` (the same row, an INSERT ... SELECT that
writes it only when the change was made).

**Written now, chained a moment later.** ``record`` is one INSERT of the row's facts and the store's clock, with
no ``seq`` and no hash: it locks nothing, so acting requests commit together as any inserts do, on one server or
several. ``datum.store.auditchain.seal`` (every second in ``datum serve``, before ``datum audit verify``) then
takes the rows not sealed yet, in the order of their ``id``, under the chain's head (``audit_chain``'s ``head``:
the last seq and hash, locked by the sealing transaction alone): row ``n`` gets ``seq`` n, ``prev``, the hash of
row ``n - 1``, and ``hash``, SHA-256 over a canonical text of its fields and ``prev`` (``digest``). Two servers
sealing at once take turns on the head: one line, never a fork. A row whose transaction committed is in the
store whatever becomes of the process after, and is sealed by the next seal of any server; until then it is
listed (no seq, no hash) and ``verify`` counts it apart. A row is tamper-evident from its seal, a second or so
after it is written. ``datum.store.auditchain.verify`` walks the chain from its anchor
(``audit_chain``'s ``anchor``: the last row ``prune`` dropped, 64 zeros
before any) and names the first row that does not hold: an edited row, a
missing one, a tail cut off. Pruning (``[server] audit_keep``) drops the
oldest sealed rows and moves the anchor in the same transaction, so verify still
passes; what cannot be told from the store alone is a chain rewritten whole
from some row on (keep the head's hash that verify prints elsewhere to tell).

No secret is ever in a row: a token is named by its id (the first 12 hex
digits of its SHA-256, as ``datum token list`` names it), and a path is kept
with whatever looks like a token redacted.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection

from datum.core.redact import redacted
from datum.core.vocab import AuditOutcome
from datum.store.schema import audit_log as t

GENESIS = "0" * 64
HEAD = "head"
ANCHOR = "anchor"

ALLOWED, DENIED, UNAUTHENTICATED = AuditOutcome.ALLOWED, AuditOutcome.DENIED, AuditOutcome.UNAUTHENTICATED
_OUTCOMES = frozenset(AuditOutcome)

# The acts of the CLI on the store: not Cedar's (Cedar decides HTTP requests; whoever may write the store may
# do these), named in its style.
CREATE_TOKEN = "token:Create"
REVOKE_TOKEN = "token:Revoke"
CLEAR_REBOOT_LEASE = "fleet:ClearRebootLease"
CREATE_JOIN_TOKEN = "enroll:CreateJoinToken"
APPROVE_HOST = "enroll:Approve"
DENY_HOST = "enroll:Deny"
REVOKE_HOST = "host:Revoke"
FORGET_HOST = "host:Forget"
# The requests that prove their caller themselves (no bearer token, no Cedar decision: a host's key, a join token):
# their principal is what they proved, ``join:<the join token's id>`` and ``host:<name>``.
ENROLL = "enroll:Enroll"
OPEN_SESSION = "enroll:OpenSession"


@dataclass
class Entry:
    """One row's facts, before the store gives it its seq, time and hashes."""

    principal: str | None
    action: str | None
    resource: str | None
    outcome: AuditOutcome = ALLOWED
    status: int | None = None
    token: str | None = None
    source: str | None = None
    request: str | None = None
    policy: str | None = None
    detail: str | None = None


COLUMNS = [f.name for f in fields(Entry)]


@dataclass
class Pending:
    """A request's row, waiting for the transaction that carries it (or its answer, when none did)."""

    entry: Entry
    written: bool = False


PENDING: ContextVar[Pending | None] = ContextVar("datum_audit_pending", default=None)
_UNCHANGED = "datum.audit.unchanged"  # in a connection's info while its transaction is not the change
_WROTE = "datum.audit.wrote"  # in a connection's info once its transaction changed a row (``wrote``)
_CARRIED = "datum.audit.carried"  # in a connection's info while a statement of its transaction carries the row


def cedar_uid(kind: str, eid: str) -> str:
    """An entity id as Cedar writes it, and as a row names its resource: ``Host::"web1"`` (the id a Cedar string
    literal). The front door's decisions and every row's ``resource`` spell it here."""
    return f"{kind}::{json.dumps(eid, ensure_ascii=False)}"


def local_principal() -> str:
    """Who acts through the CLI on the store: ``cli:<the user running it>`` (as ``by`` of a rollout command)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid
        import os

        user = str(os.getuid())
    return f"cli:{user}"


def local(action: str, resource: str | None, request: str, detail: str | None = None) -> Entry:
    """The row of a CLI act on the store: its principal (``local_principal``), this machine's name for a source."""
    return Entry(local_principal(), str(action), resource, source=socket.gethostname(), request=redacted(request),
                 detail=detail)


@contextmanager
def acting(entry: Entry) -> Iterator[Pending]:
    """The block's first committed transaction (``Store.begin``) carries ``entry``'s row."""
    pending = Pending(entry)
    token = PENDING.set(pending)
    try:
        yield pending
    finally:
        PENDING.reset(token)


def fill(**known: str | None) -> None:
    """Facts of the pending row (``Entry``'s fields) the code acting learns as it goes: the principal an enrolling
    host proved (``join:<id>``), the id of the join token just made, how many tokens a decision ended. Set
    before the commit of the transaction that carries the row; nothing when no row is pending."""
    pending = PENDING.get()
    if pending is None or pending.written:
        return
    for name, value in known.items():
        if name not in COLUMNS:
            raise TypeError(f"an audit row has no field {name!r}")
        setattr(pending.entry, name, value)


def unchanged(conn: Connection) -> None:
    """The transaction open on ``conn`` is not the change the request asked for (nothing to store, or its state
    forbids it): it does not carry the request's row, which is written with the answer."""
    if PENDING.get() is not None:
        conn.info[_UNCHANGED] = True


def own_row(conn: Connection) -> None:
    """The transaction open on ``conn`` writes a row of its own (``datum.store.auditchain.write``): the request's
    pending row is not due in it."""
    conn.info[_UNCHANGED] = True


def wrote(conn: Connection, cursor: Any, statement: str, _parameters: Any, context: Any, _many: bool) -> None:
    """SQLAlchemy's ``after_cursor_execute`` on every store engine (``datum.store.engine``): while a request's row
    is pending, whether its transaction changed a row (an INSERT, UPDATE or DELETE that touched one; a textual
    statement that is not a SELECT counts). A transaction that changed none is not the change: a plugin's write
    that found nothing to do and answers an error after its commit leaves its row with that answer."""
    if PENDING.get() is None:
        return
    if context is not None and (context.isinsert or context.isupdate or context.isdelete):
        if cursor.rowcount != 0:
            conn.info[_WROTE] = True
    elif not statement.lstrip()[:6].upper().startswith("SELECT"):
        conn.info[_WROTE] = True


def due(conn: Connection) -> Pending | None:
    """In ``Store.begin``, before the commit: write the request's pending row in this transaction when it has not
    been and this transaction is the change; the ``Pending`` written (mark it ``written`` once committed). A row a
    statement of the transaction carried already (``carrying``) is not written again."""
    changed = conn.info.pop(_WROTE, False)
    carried = conn.info.pop(_CARRIED, False)
    if conn.info.pop(_UNCHANGED, False):
        return None
    pending = PENDING.get()
    if pending is None or pending.written:
        return None
    if carried:
        return pending
    if not changed:
        return None
    record(conn, pending.entry)
    return pending


def forget(conn: Connection) -> None:
    """``Store.begin``, whatever the transaction's end: its ``unchanged`` and ``carrying`` marks go with it."""
    conn.info.pop(_UNCHANGED, None)
    conn.info.pop(_WROTE, None)
    conn.info.pop(_CARRIED, None)


def carrying(conn: Connection) -> dict[str, Any] | None:
    """The bound values of the request's pending row (``carried``'s parameters), when one is due and a statement
    of the transaction open on ``conn`` is to write it itself (the intake's one statement on PostgreSQL,
    ``datum.store.hosts``); the transaction is then marked as carrying it: ``due`` does not write it again, and
    marks it written at the commit. None when no row is pending (nothing to carry). When the statement wrote no
    row after all (its condition did not hold: the pass was not stored), the store code says ``unchanged(conn)``
    and the row goes with the answer, as any other's."""
    pending = PENDING.get()
    if pending is None or pending.written:
        return None
    _check(pending.entry)
    conn.info[_CARRIED] = True
    return {f"p_audit_{c}": v for c, v in _values(pending.entry).items()}


def when(at: datetime) -> str:
    """A row's time as hashed and shown: UTC, to the microsecond."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def digest(seq: int, at: datetime, values: dict[str, Any], prev: str) -> str:
    """The hash of a row: SHA-256 (hex) over its version (1), seq, time (``when``), fields (``Entry``'s order) and
    ``prev``, each as ``<its length in characters>:<its text>`` (``~`` for none), one after the other: what
    ``seal`` computes and ``verify`` computes again."""
    texts = [None if v is None else str(v) for v in (1, seq, when(at), *map(values.get, COLUMNS), prev)]
    text = "".join("~" if v is None else f"{len(v)}:{v}" for v in texts)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _check(entry: Entry) -> None:
    if entry.outcome not in _OUTCOMES:
        raise ValueError(f"an audit row's outcome is one of {', '.join(AuditOutcome)}, not {entry.outcome!r}")


def _values(entry: Entry) -> dict[str, Any]:
    """``entry``'s fields, whatever looks like a token redacted in each: a path or a host name may hold one pasted
    by mistake."""
    return {c: redacted(v) if isinstance(v, str) else v for c in COLUMNS for v in [getattr(entry, c)]}


def _clock(dialect: str) -> Any:
    """The store's clock as a column value (``datum.store.runs.store_now``'s): when a row is written."""
    if dialect == "postgresql":
        return sa.func.statement_timestamp()
    # to the microsecond, as SQLAlchemy writes a time; its arguments in the text (``_SQLITE``)
    return sa.func.strftime(sa.literal_column("'%Y-%m-%d %H:%M:%f000'"), sa.literal_column("'now'"))


def as_utc(value: Any) -> datetime:
    """A row's time as read back, in UTC (SQLite answers text or a naive time)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)  # type: ignore[no-any-return]


# One statement per dialect, built once: its clock in SQL, the row's fields its parameters (building an INSERT of
# thirteen columns each time cost more than the insert itself).
_RECORD = {dialect: sa.insert(t).values(at=_clock(dialect)) for dialect in ("postgresql", "sqlite")}
# On SQLite the same INSERT as the driver's text, its parameters in this order: a report's row is written in the
# server's own process there, and SQLAlchemy's execution of a statement cost a third of the row (about 30 us of
# 90, 2026-12-07; docs/performance.md, "The audit log's row on report intake").
_SQLITE_COMPILED = _RECORD["sqlite"].compile(dialect=sqlite.dialect(paramstyle="qmark"), column_keys=COLUMNS)
_SQLITE = str(_SQLITE_COMPILED)
_SQLITE_ORDER = tuple(_SQLITE_COMPILED.positiontup or ())
assert set(_SQLITE_ORDER) == set(COLUMNS), _SQLITE_ORDER


def carried(dialect: str, when: Any) -> Any:
    """The request's row as a statement another composes (a CTE of the intake's statement on PostgreSQL): the
    same row ``record`` writes (its fields bound as ``carrying`` gives them, the store's clock), written only when
    ``when`` holds (the pass was stored). An INSERT ... SELECT, each value cast to its column's type (a bound
    value in a SELECT has none of its own)."""
    values = [sa.cast(sa.bindparam(f"p_audit_{c}", type_=t.c[c].type), t.c[c].type) for c in COLUMNS]
    return sa.insert(t).from_select(["at", *COLUMNS], sa.select(_clock(dialect), *values).where(when))


def record(conn: Connection, entry: Entry) -> None:
    """Write ``entry``'s row in the transaction open on ``conn``: one INSERT, no lock; sealed into the chain after
    the commit (``datum.store.auditchain.seal``)."""
    _check(entry)
    values = _values(entry)
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql(_SQLITE, tuple(values[c] for c in _SQLITE_ORDER))
        return
    conn.execute(_RECORD[conn.dialect.name], values)

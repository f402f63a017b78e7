"""The audit log: who did what, when, from where, and what Cedar said; one hash-chained row each.

Every acting request (a pass report, a reboot lease taken or given back, a
rollout paused, resumed or aborted, a plugin's write), every refusal (401,
403) and every act of the CLI on the store (a token created or revoked, a
reboot lease cleared, a rollout commanded) is one row of ``audit_log``.

**In the change's transaction.** The HTTP front door (``datum.api.front.audit``)
leaves a ``Pending`` row in ``PENDING`` (a context variable: the request's
worker thread sees it) before the route runs; ``Store.begin`` writes it in the
first transaction of the request that commits having changed a row (``due``,
``wrote``), so a change is never stored without its row. Store code whose committed transaction is not the change
the request asked for (a duplicate pass, a rollout whose state forbids the
command) says so with ``unchanged(conn)``: the row is then written with the
answer, after it, as a refusal's is. Anything else that acts on the store (a
CLI command, another route) writes its row itself with ``record(conn, entry)``
in its own transaction, as the last statement before the commit (it locks the
chain's head until then), or wraps its transaction in ``acting(entry)``.

**Hash-chained.** Row ``n`` holds ``prev``, the hash of row ``n - 1``, and
``hash``, SHA-256 over a canonical JSON array of its fields and ``prev``
(``digest``; on PostgreSQL computed in the statement that writes the row,
one round trip: ``pg_ctes``). The chain's head (``audit_chain``'s ``head``:
the last seq and hash) is updated by every write, which locks it until the commit: two servers
on one PostgreSQL write one line, never a fork; on SQLite the write
transaction serialises already. ``datum.store.auditchain.verify`` walks the chain from its anchor
(``audit_chain``'s ``anchor``: the last row ``prune`` dropped, 64 zeros
before any) and names the first row that does not hold: an edited row, a
missing one, a tail cut off. Pruning (``[server] audit_keep``) drops the
oldest rows and moves the anchor in the same transaction, so verify still
passes; what cannot be told from the store alone is a chain rewritten whole
from some row on (keep the head's hash that verify prints elsewhere to tell).

No secret is ever in a row: a token is named by its id (the first 12 hex
digits of its SHA-256, as ``datum token list`` names it), and a path is kept
with whatever looks like a token redacted.
"""

from __future__ import annotations

import getpass
import hashlib
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from datum.core.redact import redacted
from datum.store.schema import audit_chain as chain
from datum.store.schema import audit_log as t

GENESIS = "0" * 64
HEAD = "head"
ANCHOR = "anchor"

ALLOWED = "allowed"
DENIED = "denied"
UNAUTHENTICATED = "unauthenticated"
OUTCOMES = (ALLOWED, DENIED, UNAUTHENTICATED)

# The acts of the CLI on the store: not Cedar's (Cedar decides HTTP requests; whoever may write the store may
# do these), named in its style.
CREATE_TOKEN = "token:Create"
REVOKE_TOKEN = "token:Revoke"
CLEAR_REBOOT_LEASE = "fleet:ClearRebootLease"


@dataclass
class Entry:
    """One row's facts, before the store gives it its seq, time and hashes."""

    principal: str | None
    action: str | None
    resource: str | None
    outcome: str = ALLOWED
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
_CARRIED = "datum.audit.carried"  # in a connection's info once a statement of its transaction wrote the row


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
    been and this transaction is the change; the ``Pending`` written (mark it ``written`` once committed)."""
    changed = conn.info.pop(_WROTE, False)
    if conn.info.pop(_UNCHANGED, False):
        return None
    pending = PENDING.get()
    if pending is None or pending.written:
        return None
    if conn.info.pop(_CARRIED, False):  # written by the change's own statement
        return pending
    if not changed:
        return None
    record(conn, pending.entry)
    return pending


def forget(conn: Connection) -> None:
    """``Store.begin``, whatever the transaction's end: its ``unchanged`` mark goes with it."""
    conn.info.pop(_UNCHANGED, None)
    conn.info.pop(_WROTE, None)
    conn.info.pop(_CARRIED, None)


def when(at: datetime) -> str:
    """A row's time as hashed and shown: UTC, to the microsecond."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _field(value: Any) -> str:
    return "~" if value is None else f"{len(str(value))}:{value}"


def digest(seq: int, at: datetime, values: dict[str, Any], prev: str) -> str:
    """The hash of a row: SHA-256 (hex) over its version (1), seq, time (``when``), fields (``Entry``'s order) and
    ``prev``, each as ``<its length in characters>:<its text>`` (``~`` for none), one after the other. PostgreSQL
    computes the same in the statement that writes the row (``_pg_hash``); verify computes it here."""
    text = "".join(_field(v) for v in (1, seq, when(at), *(values.get(c) for c in COLUMNS), prev))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _pg_field(sql: str) -> str:
    return f"(CASE WHEN ({sql}) IS NULL THEN '~' ELSE char_length({sql}) || ':' || ({sql}) END)"


_PG_AT = "to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
# ``digest`` in SQL, in the head's UPDATE: ``seq`` and ``hash`` there are the head's before it (the last row's).
_PG_HASH = "encode(sha256(convert_to(" + " || ".join(
    [_pg_field("'1'"), _pg_field("CAST(seq + 1 AS text)"), _pg_field(_PG_AT),
     *(_pg_field(f"CAST(:audit_{c} AS text)") for c in COLUMNS), _pg_field("hash")]
) + ", 'UTF8')), 'hex')"


def pg_ctes(when_sql: str = "TRUE") -> str:
    """PostgreSQL: the CTEs that write a row in the statement they end (``record``'s one round trip; the intake's
    own statement, ``datum.store.hosts``): the head moved (locked until the commit, read as its last committed
    version whatever the statement's snapshot) with the row's hash computed from it, then the row. Written only
    when ``when_sql`` holds. Its parameters: ``pg_params``."""
    columns = ", ".join(COLUMNS)
    return f"""audit_head AS (
  UPDATE audit_chain SET seq = seq + 1, prev = hash, at = statement_timestamp(), hash = {_PG_HASH}
  WHERE name = '{HEAD}' AND ({when_sql})
  RETURNING seq, prev, hash, at
), audit_row AS (
  INSERT INTO audit_log (seq, at, {columns}, prev, hash)
  SELECT seq, at, {", ".join(f"CAST(:audit_{c} AS {'integer' if c == 'status' else 'text'})" for c in COLUMNS)},
    prev, hash FROM audit_head
  RETURNING seq
)"""


def pg_params(entry: Entry) -> dict[str, Any]:
    """The parameters of ``pg_ctes``: ``entry``'s fields, whatever looks like a token redacted."""
    _check(entry)
    return {f"audit_{c}": v for c, v in _values(entry).items()}


_PG_RECORD = sa.text(f"WITH {pg_ctes()} SELECT seq FROM audit_row")


def carried(conn: Connection) -> None:
    """The statement just run on ``conn`` wrote the request's pending row (``pg_ctes``): ``due`` writes no other."""
    conn.info[_CARRIED] = True


def pending_entry() -> Entry | None:
    """The request's row when one is pending and not written yet (what a statement may carry, ``pg_ctes``)."""
    pending = PENDING.get()
    return None if pending is None or pending.written else pending.entry


def _check(entry: Entry) -> None:
    if entry.outcome not in OUTCOMES:
        raise ValueError(f"an audit row's outcome is one of {', '.join(OUTCOMES)}, not {entry.outcome!r}")


def _values(entry: Entry) -> dict[str, Any]:
    """``entry``'s fields, whatever looks like a token redacted in each: a path or a host name may hold one pasted
    by mistake."""
    return {c: redacted(v) if isinstance(v, str) else v for c in COLUMNS for v in [getattr(entry, c)]}


def _clock(dialect: str) -> Any:
    """The store's clock as a column of the head's ``RETURNING`` (``datum.store.runs.store_now``'s)."""
    return sa.func.strftime("%Y-%m-%d %H:%M:%f", "now")


def _at(value: Any) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)  # type: ignore[no-any-return]


def record(conn: Connection, entry: Entry) -> int:
    """Write ``entry``'s row in the transaction open on ``conn``, chained to the last one; its seq.

    Locks the chain's head until the transaction ends: call it last, just before the commit (a lock taken after
    it, waited for by a writer holding one before its own audit row, would deadlock the two). One statement on
    PostgreSQL (``pg_ctes``); three on SQLite, where the write transaction holds the file anyway.
    """
    if conn.dialect.name == "postgresql":
        return int(conn.execute(_PG_RECORD, pg_params(entry)).scalar_one())
    _check(entry)
    head = conn.execute(
        sa.update(chain).where(chain.c.name == HEAD).values(seq=chain.c.seq + 1)
        .returning(chain.c.seq, chain.c.hash, _clock(conn.dialect.name))
    ).one()
    seq, prev, at = int(head[0]), str(head[1]), _at(head[2])
    values = _values(entry)
    own = digest(seq, at, values, prev)
    conn.execute(sa.insert(t).values(seq=seq, at=at, prev=prev, hash=own, **values))
    conn.execute(sa.update(chain).where(chain.c.name == HEAD).values(hash=own, prev=prev, at=at))
    return seq

"""The front door's part of the audit log (``datum.store.audit``): which requests leave a row, with what facts.

- An acting request (``POST``, ``PUT``, ``PATCH``, ``DELETE``) that Cedar
  admitted: its row waits in ``datum.store.audit.PENDING`` for the transaction
  of its change, which carries it (outcome ``allowed``, the route's status: a
  pass stored is 201; the pass report's row is written by the intake's own
  statement on PostgreSQL, ``datum.store.hosts.take_pass``). When no
  transaction carried it (the route refused: 404, 409, 422, 503; a duplicate
  pass), it is written with the answer's status before the answer goes out.
- A refusal, whatever the method: ``401`` (outcome ``unauthenticated``, no
  principal) and ``403`` (``denied``, with the principal and the action
  refused), written before the answer goes out. At most ``REFUSALS`` are
  written at once per process: a flood of unauthenticated requests costs the
  store that many writes at a time, not one each; the next refusal written
  says how many were not (``detail``).

A pass report admitted (``fleet:ReportPass``) is an act like any other: a thousand hosts reporting every 15 minutes
write about 96,000 rows a day (docs/server.md, "The audit log", has their size). ``[server] audit_reports = false``
leaves the admitted ones out (``REPORTS``: the pass archive keeps every report anyway); a report refused (401, 403)
is recorded whatever it says, as any refusal.

A row holds the token's id, never the token, and the request's path with
whatever looks like a token redacted. The client's address is the
connection's (uvicorn's ``--forwarded-allow-ips`` decides whether a proxy's
``X-Forwarded-For`` replaces it).
"""

from __future__ import annotations

import logging

import anyio.to_thread
from starlette.types import Message, Scope, Send

from datum.api.front.authz import Action
from datum.api.front.security import FACTS, presented
from datum.api.front.state import ServerState
from datum.api.front.tokens import token_id
from datum.core.redact import redacted
from datum.core.vocab import AuditOutcome
from datum.store import auditchain
from datum.store.audit import Entry, Pending

log = logging.getLogger("datum.api")

ACTING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
REPORTS = str(Action.REPORT_PASS)  # the act [server] audit_reports = false leaves unrecorded when admitted
REFUSALS = 4  # refusals written at once per process; past that they are counted, not written


def facts(scope: Scope) -> Entry:
    """A request's row as the front door first knows it: where from, what it asked; left in the scope."""
    client = scope.get("client")
    entry = Entry(
        None, None, None, source=str(client[0])[:253] if client else None,
        request=f"{scope['method']} {redacted(scope['path'])}"[:2000],
    )
    scope[FACTS] = entry
    return entry


def admitted(scope: Scope, entry: Entry, principal: str) -> None:
    """The principal the request's token resolved to, and the token's id (never the token)."""
    entry.principal = principal
    token = presented(scope)
    entry.token = token_id(token) if token else None


def audited(method: str, action: str | None, reports: bool = True) -> bool:
    """Whether a request admitted is an act that leaves its row (a refusal always does); ``reports``: ``[server]
    audit_reports``, whether an admitted pass report does."""
    return method in ACTING and (reports or action != REPORTS)


class Recording:
    """Writes the rows no transaction carried, as the answer goes out; bounds the refusals written at once."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._writing = 0
        self._dropped = 0

    def sending(self, send: Send, entry: Entry, pending: Pending | None) -> Send:
        """``send``, writing ``entry``'s row before the answer's start when it needs one and none was written."""

        async def recorded(message: Message) -> None:
            if message["type"] == "http.response.start":
                status = int(message["status"])
                if (pending is not None and not pending.written) or (pending is None and AuditOutcome.of(status).refusal):
                    await self.write(entry, status)
            await send(message)

        return recorded

    async def write(self, entry: Entry, status: int) -> None:
        store = self.state.store
        if store is None:  # not wired: nothing was done, and there is nowhere to write
            return
        entry.status, entry.outcome = status, AuditOutcome.of(status)
        refusal = entry.outcome.refusal
        if refusal and self._writing >= REFUSALS:
            self._dropped += 1
            return
        if refusal and self._dropped:
            entry.detail = (f"{self._dropped} refusals before this one were not recorded: more than {REFUSALS} "
                            "were being written at once")
            self._dropped = 0
        self._writing += refusal
        try:
            await anyio.to_thread.run_sync(auditchain.write, store, entry)
        except Exception:  # noqa: BLE001 - the answer still goes out; the store's fault is logged
            log.exception("the audit row of %s could not be written", entry.request)
        finally:
            self._writing -= refusal

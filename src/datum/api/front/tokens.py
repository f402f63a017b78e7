"""Bearer tokens: minted once, stored only as SHA-256 hashes, resolved to a principal.

A token is 32 random bytes (URL-safe base64 with a ``datum_`` prefix), so a
plain SHA-256 is a sound hash for it: there is nothing to brute-force. A
request's token is hashed and looked up by hash, which compares no secret
byte by byte; the configured hashes are checked with ``hmac.compare_digest``.
Tokens come from two places: ``[server.tokens]`` in the configuration and the
``tokens`` table that ``datum token create`` writes, ``datum token list``
shows (by an id: the first 12 hex digits of the hash, never the token) and
``datum token revoke`` deletes. A store token may be bound to one host (``--host``: an agent's,
``agent@host:web1``) or scoped to host groups (``--group``: ``operator@groups:db,web``), which is
what its principal is resolved to (``datum.api.front.authz``). A server remembers the store tokens presented
to it and checks them all against the store every ``RECHECK`` seconds
(``TokenBook.revalidate``, on a thread the server runs), so a revoked one is
refused by every server within that.

An enrolled host's sessions (``datum.fleet.enroll``) are rows of the same table,
bound to their host, with an end (``expires_at``): past it a session is refused,
and ``datum host revoke`` deletes them, so they fail within ``RECHECK`` as a
revoked token does. With ``[server] require_enrolled_agents`` an agent's token
that is not a session is refused, saying so.
"""

from __future__ import annotations

import hmac
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from datum.api.front.authz import bound, scoped
from datum.core.findings import ErrorCode, FieldError, Problem, invalid
from datum.store import Store, audit
from datum.store.schema import tokens
from datum.store.tokens import AGENT, ID_LENGTH, check_host, digest, mint

log = logging.getLogger("datum.api")

__all__ = ["ID_LENGTH", "RECHECK", "TokenBook", "create", "digest", "listed", "revoke"]

# A remembered store token is checked against the store every RECHECK seconds, all of them in one
# query (a revoke is refused within that). It does not lapse while in use: a lapsing entry sent
# every request in flight to the store at once (a 2 s lapse measured the manifest's p99 at 39 ms
# against 8.8 ms). When the store cannot answer, an entry is trusted TRUST seconds after the store
# last confirmed it. Entries not presented for IDLE seconds are forgotten; at most MOST are kept.
RECHECK = 2.0
TRUST = 30.0
IDLE = 600.0
MOST = 10_000


_PRINCIPAL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$")


def check_principal(name: str) -> str:
    """A principal name: 1-100 of letters, digits and ``_.@-``, starting with a letter or digit."""
    if not _PRINCIPAL.match(name):
        raise invalid(
            [FieldError("principal", "1-100 of letters, digits and '_.@-', starting with a letter or digit")],
            f"principal {name!r} is not a valid name",
        )
    return name


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")


def check_groups(principal: str, host: str | None, groups: Sequence[str]) -> str | None:
    """The stored form of ``groups`` (comma-separated, sorted; None for none), or ``USAGE``/``INVALID_INPUT``
    saying why a token cannot be scoped to them."""
    if not groups:
        return None
    if host is not None or principal == "agent":
        raise Problem.one(
            ErrorCode.USAGE, "an agent token speaks for one host (--host), never for groups: --group is for the tokens of "
            "people and dashboards (operator, viewer)",
        )
    bad = [g for g in groups if not _NAME.match(g)]
    if bad:
        raise invalid(
            [FieldError("group", "1-253 of letters, digits and '_.-', starting with a letter or digit")],
            f"not a host group's name: {', '.join(repr(g) for g in bad)}",
        )
    return ",".join(sorted(set(groups)))


def create(store: Store, principal: str, host: str | None = None, groups: Sequence[str] = ()) -> str:
    """Mint a token for ``principal`` (bound to ``host``, or scoped to host ``groups``, when given), store its
    hash, return the token (shown once)."""
    check_principal(principal)
    if host is not None:
        check_host(host)
    stored = check_groups(principal, host, groups)
    token = mint()
    # recorded in the audit log, in the same transaction, as the CLI's act (datum.store.audit.local)
    made = audit.local(audit.CREATE_TOKEN, audit.cedar_uid("Token", token_id(token)), "datum token create",
                       _named(principal, host, groups))
    with store.begin() as conn:
        conn.execute(
            sa.insert(tokens).values(
                sha256=digest(token), principal=principal, created_at=datetime.now(UTC), host=host, groups=stored
            )
        )
        audit.record(conn, made)
    return token


def token_id(token: str) -> str:
    """How a token is named where it is shown (``datum token list``, the audit log): its hash's first digits."""
    return digest(token)[:ID_LENGTH]


def _named(principal: str, host: str | None, groups: Sequence[str] | None = ()) -> str:
    return (f"principal {principal}" + (f", bound to host {host}" if host else "")
            + (f", groups {', '.join(groups)}" if groups else ""))


def listed(store: Store) -> list[dict[str, Any]]:
    """The store's tokens, oldest first: ``id``, ``principal``, ``host``, ``groups`` (None: every group),
    ``createdAt`` (never the token)."""
    with store.connect() as conn:
        rows = conn.execute(
            sa.select(tokens.c.sha256, tokens.c.principal, tokens.c.host, tokens.c.groups, tokens.c.created_at)
            .where(tokens.c.session == sa.false())  # a host's sessions come and go with its key (datum enroll list)
            .order_by(tokens.c.created_at, tokens.c.sha256)
        ).all()
    return [
        {"id": r.sha256[:ID_LENGTH], "principal": r.principal, "host": r.host, "groups": _groups(r.groups),
         "createdAt": r.created_at.replace(tzinfo=UTC).isoformat() if r.created_at else None}
        for r in rows
    ]


def _groups(stored: str | None) -> list[str] | None:
    return stored.split(",") if stored else None


def revoke(store: Store, token_id: str) -> dict[str, Any]:
    """Delete the one token whose hash starts with ``token_id`` (at least ``ID_LENGTH`` hex digits); what it was.

    NOT_FOUND when none does; USAGE when the id is too short or names more than one.
    """
    wanted = token_id.lower()
    if not re.fullmatch(rf"[0-9a-f]{{{ID_LENGTH},64}}", wanted):
        raise Problem.one(ErrorCode.USAGE, f"a token id is {ID_LENGTH} to 64 hex digits (datum token list shows them): {token_id!r}")
    with store.begin() as conn:
        rows = conn.execute(_HOLDERS.where(tokens.c.sha256.startswith(wanted))).all()
        if not rows:
            raise Problem.one(ErrorCode.NOT_FOUND, f"no token has the id {token_id}")
        if len(rows) > 1:
            raise Problem.one(ErrorCode.USAGE, f"the id {token_id} names {len(rows)} tokens: give more of it")
        conn.execute(sa.delete(tokens).where(tokens.c.sha256 == rows[0].sha256))
        audit.record(conn, audit.local(audit.REVOKE_TOKEN, audit.cedar_uid("Token", rows[0].sha256[:ID_LENGTH]), "datum token revoke",
                                       _named(rows[0].principal, rows[0].host, _groups(rows[0].groups))))
    return {"id": rows[0].sha256[:ID_LENGTH], "principal": rows[0].principal, "host": rows[0].host,
            "groups": _groups(rows[0].groups)}


class TokenBook:
    """Resolves a presented token to its principal.

    A store token found once is remembered, so a busy endpoint does not ask
    the store on every request; a miss always asks the store, so a token
    minted a moment ago works at once. Remembered tokens never lapse while
    they are in use: ``revalidate`` (every ``RECHECK`` seconds, on a thread
    of the server's) asks the store about all of them in one query and drops
    the ones revoked (deleted) or changed, so a revoke is refused within
    ``RECHECK`` seconds and a busy token never goes back to the store with
    every request in flight at once. When the store cannot answer, memory is
    kept as it was, but only for ``TRUST`` seconds after an entry's last
    confirmation: past that the token asks the store with its request (which
    fails as the request would: the store is down). Entries not presented for
    ``IDLE`` seconds are forgotten, and at most ``MOST`` are kept.
    """

    def __init__(
        self,
        configured: Mapping[str, Sequence[str]],
        store: Store | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        enrolled_only: bool = False,
    ) -> None:
        self._configured = [
            (h.removeprefix("sha256:"), principal) for principal, hashes in configured.items() for h in hashes
        ]
        self._store: Store | None = None
        self._clock = clock
        self._wall = wall  # a session's end is a time of day (the store's expires_at)
        self._enrolled_only = enrolled_only
        # hash -> (principal, when the store last said so); hash -> when it was last presented
        self._cache: dict[str, tuple[str, float]] = {}
        self._used: dict[str, float] = {}
        self._failing = False
        self._lock = threading.Lock()  # writers only: known() reads without it
        if store is not None:
            self.attach(store)

    def attach(self, store: Store) -> None:
        """Read the ``tokens`` table of ``store`` from now on."""
        self._store = store
        self._cache.clear()
        self._used.clear()

    def known(self, token: str) -> str | None:
        """The principal of ``token`` when it is known without asking the store, else None.

        For the event loop's fast path: never blocks on the store; a token it
        cannot vouch for goes the long way, where a store fault is answered in
        the contract's shape.
        """
        if not token or len(token) > 200:
            return None
        h = digest(token)
        for known, principal in self._configured:
            if hmac.compare_digest(known, h):
                return None if self._enrolled_only and principal == AGENT else principal
        hit = self._cache.get(h)
        if hit is None:
            return None
        now = self._clock()
        if hit[1] + TRUST < now:  # not confirmed for too long (no revalidation, or the store is down)
            return None
        self._used[h] = now
        return hit[0]

    def principal(self, token: str) -> str | None:
        """The principal ``token`` belongs to, or None; ``401 UNAUTHENTICATED`` saying why for a session that
        ended and, with ``[server] require_enrolled_agents``, for an agent's token that is not a session."""
        found = self.known(token)
        if found is not None or not token or len(token) > 200:
            return found
        h = digest(token)
        if self._enrolled_only and any(
            principal == AGENT and hmac.compare_digest(known, h) for known, principal in self._configured
        ):
            raise Problem.one(ErrorCode.UNAUTHENTICATED, NOT_ENROLLED)
        now = self._clock()
        found = self._lookup(h)
        if found is not None:
            with self._lock:
                self._cache[h] = (found, now)
                self._used[h] = now
        return found

    def revalidate(self) -> None:
        """Ask the store about every remembered token in one query; drop the revoked, changed and idle ones.

        A store fault keeps memory as it is (logged once per fault): each
        entry is trusted until ``TRUST`` after its last confirmation.
        """
        if self._store is None:
            return
        now = self._clock()
        used = self._used.copy()
        remembered = set(self._cache)  # a token remembered meanwhile (another thread) is left to the next round
        recent = sorted((h for h in remembered if used.get(h, now) + IDLE >= now), key=lambda h: used.get(h, now), reverse=True)
        asked = recent[:MOST]
        with self._lock:
            for h in remembered.difference(asked):
                self._drop(h)
        if not asked:
            return
        try:
            with self._store.connect() as conn:
                rows = conn.execute(_HOLDERS.where(tokens.c.sha256.in_(asked))).all()
        except Exception as exc:  # noqa: BLE001 - a store fault keeps memory; retried at the next round
            if not self._failing:
                log.warning("checking remembered tokens against the store failed (kept as they are): %s", exc)
            self._failing = True
            return
        self._failing = False
        wall = self._wall()
        holders = {r.sha256: self._holder(r, wall)[0] for r in rows}
        with self._lock:
            for h in asked:
                hit = self._cache.get(h)
                if hit is not None and holders.get(h) == hit[0]:
                    self._cache[h] = (hit[0], now)
                elif hit is not None:  # revoked, or its principal or host changed: the next request asks
                    self._drop(h)

    def _drop(self, h: str) -> None:
        self._cache.pop(h, None)
        self._used.pop(h, None)

    def _lookup(self, h: str) -> str | None:
        if self._store is None:
            return None
        with self._store.connect() as conn:
            row = conn.execute(_HOLDERS.where(tokens.c.sha256 == h)).first()
        if row is None:
            return None
        found, why = self._holder(row, self._wall())
        if why is not None:
            raise Problem.one(ErrorCode.UNAUTHENTICATED, why)
        return found

    def _holder(self, row: Any, now: datetime) -> tuple[str | None, str | None]:
        """(the principal a ``tokens`` row speaks for now, or None and why not): a session ends at its
        ``expires_at``; an agent's token that is not a session is refused when only enrolled hosts are."""
        if row.expires_at is not None and row.expires_at <= now:
            return None, ENDED
        if self._enrolled_only and row.principal == AGENT and not row.session:
            return None, NOT_ENROLLED
        return _principal(row), None


_HOLDERS = sa.select(
    tokens.c.sha256, tokens.c.principal, tokens.c.host, tokens.c.groups, tokens.c.session, tokens.c.expires_at
)
ENDED = "the session has ended: the agent asks for another with its host key"
NOT_ENROLLED = (
    "this server takes an agent's requests only with a session from an enrolled host's key ([server] "
    "require_enrolled_agents), not with a token made by datum token create or [server.tokens]: enroll the host "
    "(datum enroll create --host NAME on the server, then the line it prints on the host)"
)


def _principal(row: sa.Row[Any]) -> str:
    """The principal a ``tokens`` row speaks for: bound to its host, or scoped to its groups, when it has them."""
    if row.host:
        return bound(str(row.principal), str(row.host))
    if row.groups:
        return scoped(str(row.principal), str(row.groups).split(","))
    return str(row.principal)

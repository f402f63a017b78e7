"""Enrollment: a host joins the fleet with a key of its own, and has sessions from it instead of a copied secret.

- ``create_join`` makes a join token (``datum enroll create``): for one named host,
  single use, which is that host's approval; or for a pattern of names
  (``web-*``), some number of uses, each request approved by the hook
  (``[enroll] approve``) or by a person (``datum enroll approve NAME``). Only its
  SHA-256 is kept, as for a bearer token, and it ends at ``expires_at``.
- ``enroll`` takes a host's request: its name, its Ed25519 public key, its claimed
  facts and its signature over a nonce of the server's (``nonce``), its clock and
  the join token's id. The server keeps the host's identity: name, key, state
  (``datum.core.vocab.IdentityState``), when, through which join
  token, from where. A pending request is answered at once; the approval hook
  is asked about it off the request (``datum.fleet.approvals``). A name that already has another key is refused (409), never
  taken over: ``forget`` the name, or enroll with a join token made with
  ``--replace`` (a rebuilt host).
- ``session`` takes an active host's signature over a fresh nonce, its name and
  its clock, and mints a bearer token bound to that host (principal ``agent``)
  that ends after ``[enroll] session_ttl``: a row of ``tokens`` with
  ``session`` set, refused past ``expires_at`` (``datum.api.front.tokens``).
- ``revoke`` ends every session of a host (and every agent token bound to it) by
  deleting them: each server refuses them within its 2 s re-check, whichever
  server they were presented to. ``forget`` removes the identity: the name may
  enroll again, with any key.

A nonce is its time, random bytes and an HMAC under a secret every server of
the store shares (``server_secrets``), good for ``NONCE_LIFE`` seconds on any of
them and for one proof: the first that verifies takes it (``datum.store.nonces``),
and the same proof sent again is 401. A host whose clock is more than ``SKEW`` seconds off
the server's is refused, the offset named. Every time is the caller's ``now``
(the server's clock, which tests inject).
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import json
import logging
import re
import secrets
import weakref
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from datum.core.findings import ErrorCode, FieldError, Finding, Problem, invalid
from datum.core.vocab import IdentityState
from datum.identity import b64, fingerprint, signed, skew_problem, unb64, verified
from datum.store import Store, audit, nonces
from datum.store.identities import ACTIVE, DENIED, PENDING, REVOKED, STATES, labels_in
from datum.store.schema import host_identities, join_tokens, server_secrets, tokens
from datum.store.tokens import AGENT, ID_LENGTH, check_host, digest, mint

log = logging.getLogger("datum.fleet")

JOIN_KIND = "j_"  # a join token is datum_j_...
JOIN_TTL = timedelta(hours=24)
JOIN_TTL_MAX = timedelta(days=365)
USES_MAX = 1_000_000
NONCE_LIFE = 120  # seconds a nonce is good for
NONCE_EARLY = 5  # seconds a nonce may seem to come from the future (another server's clock)
NONCE_KEPT = 300  # seconds a spent nonce is kept past its life: room for the replicas' clocks
FACTS_MAX = 16 * 1024  # characters of claimed facts kept with an identity
_PATTERN = re.compile(r"^[A-Za-z0-9_.*?\[\]!-]{1,253}$")
LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,62}$")
LABEL_VALUE = re.compile(r"^[A-Za-z0-9_.:/@-]{0,253}$")
LABELS_MAX = 32


@dataclass(frozen=True)
class JoinToken:
    """A join token as ``datum enroll create`` made it (never the token: its ``id``)."""

    id: str
    host: str | None
    pattern: str | None
    group: str | None
    uses: int
    used: int
    replace: bool
    created_at: datetime
    expires_at: datetime
    labels: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "uses": self.uses, "used": self.used, "replace": self.replace,
                               "createdAt": self.created_at.isoformat(), "expiresAt": self.expires_at.isoformat()}
        for key, value in (("host", self.host), ("pattern", self.pattern), ("group", self.group)):
            if value is not None:
                out[key] = value
        if self.labels:
            out["labels"] = self.labels
        return out


def _join(row: Any) -> JoinToken:
    return JoinToken(row.sha256[:ID_LENGTH], row.host, row.pattern, row.group_name, row.uses, row.used,
                     bool(row.replace), row.created_at, row.expires_at, labels_in(row.labels))


def _labels_problems(labels: dict[str, str]) -> list[FieldError]:
    """What is wrong with ``labels`` given at enrollment (each label named)."""
    found = []
    if len(labels) > LABELS_MAX:
        found.append(FieldError("label", f"at most {LABELS_MAX} labels"))
    for key, value in labels.items():
        if not LABEL_KEY.match(key):
            found.append(FieldError(f"label.{key}", "a label's name: 1-63 of letters, digits and '_./-', from a letter or digit"))
        elif not LABEL_VALUE.match(value):
            found.append(FieldError(f"label.{key}", "a label's value: up to 253 of letters, digits and '_.:/@-'"))
    return found


def create_join(
    store: Store,
    now: datetime,
    *,
    host: str | None = None,
    pattern: str | None = None,
    uses: int = 1,
    ttl: timedelta = JOIN_TTL,
    group: str | None = None,
    replace: bool = False,
    labels: dict[str, str] | None = None,
) -> tuple[str, JoinToken]:
    """A new join token (shown once) and what it is; the ones that ended are purged meanwhile. ``labels`` are given
    to every host enrolled with it (the server's word, as nodes.yaml's ``labels:``; never the host's)."""
    labels = dict(labels or {})
    found: list[FieldError] = _labels_problems(labels)
    if (host is None) == (pattern is None):
        raise Problem.one(ErrorCode.USAGE, "a join token is for one --host NAME or for a --pattern GLOB of names")
    if host is not None:
        check_host(host)
        if uses != 1:
            found.append(FieldError("uses", "a join token for one named host is used once"))
    if pattern is not None and not _PATTERN.match(pattern):
        found.append(FieldError("pattern", "1-253 of letters, digits, '_.-' and the wildcards '*?[]!'"))
    if not 1 <= uses <= USES_MAX:
        found.append(FieldError("uses", f"from 1 to {USES_MAX}"))
    if not timedelta(seconds=1) <= ttl <= JOIN_TTL_MAX:
        found.append(FieldError("ttl", "from 1s to 365 days"))
    if group is not None and not (group.strip() and len(group) <= 253):
        found.append(FieldError("group", "a group name, 1 to 253 characters"))
    if found:
        raise invalid(found, "the join token cannot be made")
    token = mint(JOIN_KIND)
    made = JoinToken(digest(token)[:ID_LENGTH], host, pattern, group, uses, 0, replace, now, now + ttl, labels)
    row: dict[str, Any] = {"sha256": digest(token), "host": host, "pattern": pattern, "group_name": group, "uses": uses,
           "used": 0, "replace": replace, "created_at": now, "expires_at": now + ttl,
           "labels": json.dumps(labels, sort_keys=True) if labels else None}
    with store.begin() as conn:
        conn.execute(sa.delete(join_tokens).where(join_tokens.c.expires_at <= now))
        conn.execute(sa.insert(join_tokens).values(**row))
        # recorded in the audit log with it, as datum token create's (never the token: its id)
        audit.record(conn, audit.local(audit.CREATE_JOIN_TOKEN, audit.cedar_uid("JoinToken", made.id), "datum enroll create",
                                       _described(made)))
    return token, made


def _described(made: JoinToken) -> str:
    """What a join token enrolls, as its audit row's ``detail`` says it."""
    said = f"host {made.host}" if made.host else f"pattern {made.pattern!r}, {made.uses} uses"
    for word, value in (("group", made.group), ("labels", ",".join(f"{k}={v}" for k, v in sorted(made.labels.items())))):
        if value:
            said += f", {word} {value}"
    return said + (", --replace" if made.replace else "") + f", until {made.expires_at.isoformat()}"


def join_tokens_open(store: Store, now: datetime) -> list[JoinToken]:
    """The join tokens that can still be used, oldest first."""
    with store.connect() as conn:
        rows = conn.execute(
            sa.select(join_tokens)
            .where(join_tokens.c.expires_at > now, join_tokens.c.used < join_tokens.c.uses)
            .order_by(join_tokens.c.created_at, join_tokens.c.sha256)
        ).all()
    return [_join(r) for r in rows]


# -- nonces ---------------------------------------------------------------------------------------

_SECRETS: weakref.WeakKeyDictionary[Store, bytes] = weakref.WeakKeyDictionary()


def _secret(store: Store, now: datetime) -> bytes:
    """The HMAC key of nonces, shared by every server of ``store`` (made by the first that needs it)."""
    known = _SECRETS.get(store)
    if known is not None:
        return known
    query = sa.select(server_secrets.c.value).where(server_secrets.c.name == "nonce")
    with store.connect() as conn:
        value = conn.execute(query).scalar()
    if value is None:
        try:
            with store.begin() as conn:
                audit.unchanged(conn)  # not what the request asked for: its audit row is not this transaction's
                conn.execute(sa.insert(server_secrets).values(name="nonce", value=secrets.token_hex(32), created_at=now))
        except Problem:  # another server made it first: read theirs
            pass
        with store.connect() as conn:
            value = conn.execute(query).scalar_one()
    _SECRETS[store] = bytes.fromhex(str(value))
    return _SECRETS[store]


def _mac(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()[:32]


def nonce(store: Store, now: datetime) -> str:
    """A nonce for a host to sign: good on every server of ``store`` for ``NONCE_LIFE`` seconds."""
    text = f"{int(now.timestamp())}.{secrets.token_urlsafe(12)}"
    return f"{text}.{_mac(_secret(store, now), text)}"


def _spend(store: Store, given: str) -> None:
    """Take the nonce of a proof that verified: a proof is good once, on every server of ``store``, and taken before
    what it asks for is done (a refused proof sent again after the refusal's cause has gone is still refused)."""
    if not nonces.spend(store, given, _kept_until(given)):
        raise _used()


def _kept_until(given: str) -> datetime:
    """Until when the spent nonce ``given`` (checked: ``_check_nonce``) is kept: past its life, with room for the
    replicas' clocks."""
    return datetime.fromtimestamp(int(given.partition(".")[0]) + NONCE_LIFE + NONCE_KEPT, UTC)


def _used() -> Problem:
    return Problem.one(
        ErrorCode.UNAUTHENTICATED,
        "the nonce was used already (a proof is good for one request): ask for another (GET /v1/enroll/nonce)",
    )


def _check_nonce(store: Store, given: str, now: datetime) -> None:
    when, _, rest = given.partition(".")
    random, _, mac = rest.partition(".")
    text = f"{when}.{random}"
    good = when.isdigit() and len(given) <= 100 and hmac.compare_digest(mac, _mac(_secret(store, now), text))
    age = now.timestamp() - int(when) if good else 0
    if not good or not -NONCE_EARLY <= age <= NONCE_LIFE:
        raise Problem.one(
            ErrorCode.UNAUTHENTICATED,
            f"the nonce is not one this server gave in the last {NONCE_LIFE} s: ask for another (GET /v1/enroll/nonce)",
        )


# -- the host's proof -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Proof:
    """What a host sends to enroll or to have a session: its name, a nonce of the server's, its clock (Unix
    seconds) and its signature; to enroll, its public key and its claimed facts too."""

    host: str
    nonce: str
    time: int
    signature: str
    public_key: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)


def _checked(store: Store, proof: Proof, now: datetime) -> bytes:
    """The proof's signature bytes, once its name, nonce and clock are good (else the Problem saying which)."""
    check_host(proof.host)
    why = skew_problem(proof.time, now.timestamp())
    if why is not None:  # a proof made at another time proves nothing: refused as any failed proof is (401)
        raise Problem([Finding(ErrorCode.UNAUTHENTICATED, why, (FieldError("time", why),))])
    _check_nonce(store, proof.nonce, now)
    signature = unb64(proof.signature)
    if signature is None:
        raise invalid([FieldError("signature", "URL-safe base64 of an Ed25519 signature")], "the signature is not one")
    return signature


def _public(proof: Proof) -> bytes:
    raw = unb64(proof.public_key or "")
    if raw is None or len(raw) != 32:
        raise invalid([FieldError("publicKey", "URL-safe base64 of a 32-byte Ed25519 public key")],
                      "the public key is not one")
    return raw


@dataclass(frozen=True)
class Identity:
    host: str
    fingerprint: str
    state: IdentityState
    reason: str | None
    join_token: str | None
    group: str | None
    source: str | None
    created_at: datetime
    changed_at: datetime
    labels: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"host": self.host, "fingerprint": self.fingerprint, "state": self.state,
                               "createdAt": self.created_at.isoformat(), "changedAt": self.changed_at.isoformat()}
        for key, value in (("reason", self.reason), ("joinToken", self.join_token), ("group", self.group),
                           ("source", self.source)):
            if value is not None:
                out[key] = value
        if self.labels:
            out["labels"] = self.labels
        return out


def _identity(row: Any) -> Identity:
    return Identity(row.host, row.fingerprint, IdentityState(row.state), row.reason, row.join_token, row.group_name,
                    row.source, row.created_at, row.changed_at, labels_in(row.labels))


def enroll(store: Store, proof: Proof, join: str, source: str | None, now: datetime, hooked: bool = False) -> Identity:
    """Take a host's request to enroll with the join token ``join``; its identity as it stands after it.

    A request left pending is due for the approval hook when ``hooked`` (``datum.fleet.approvals`` asks it, off
    this request). A request made again with the same key and join token (an answer lost on the way, an agent
    waiting for the decision) is answered with the identity as it stands, using nothing more of the token.
    """
    signature = _checked(store, proof, now)
    public = _public(proof)
    token_hash = digest(join)
    token_id = token_hash[:ID_LENGTH]
    key_text = b64(public)
    if not verified(public, signature, signed("enroll", proof.nonce, proof.host, proof.time, token_id, key_text)):
        raise Problem.one(ErrorCode.UNAUTHENTICATED, "the signature does not verify with the public key sent")
    _spend(store, proof.nonce)
    facts = json.dumps(proof.facts, separators=(",", ":"), default=str)
    with store.begin() as conn:
        row = conn.execute(sa.select(join_tokens).where(join_tokens.c.sha256 == token_hash)).first()
        held = conn.execute(sa.select(host_identities).where(host_identities.c.host == proof.host)).first()
        if row is not None and held is not None and held.public_key == key_text and held.join_token == token_id:
            audit.fill(principal=f"join:{token_id}", token=token_id, detail=f"asked again: {held.state}")
            return _identity(held)  # asked again: as it stands
        joined = _usable(row, proof.host, now)
        state, reason = _decided(held, proof.host, key_text, joined, hooked)
        if held is not None and held.public_key != key_text:  # a rebuilt host, with a token made with --replace
            _end_sessions(conn, proof.host)
        used = conn.execute(
            sa.update(join_tokens)
            .where(join_tokens.c.sha256 == token_hash, join_tokens.c.used < join_tokens.c.uses)
            .values(used=join_tokens.c.used + 1)
        ).rowcount
        if used != 1:  # another request took its last use meanwhile
            raise Problem.one(ErrorCode.UNAUTHENTICATED, f"the join token {token_id} has been used ({joined.uses} of {joined.uses} uses)")
        audit.fill(detail=f"{state}: {reason}")  # its row is written with this transaction (Store.begin)
        values = {"public_key": key_text, "fingerprint": fingerprint(public), "state": state, "reason": reason,
                  "join_token": token_id, "group_name": joined.group, "source": (source or "")[:100] or None,
                  "facts": facts if len(facts) <= FACTS_MAX else None, "changed_at": now,
                  "hook_due": now if state == PENDING and hooked else None,
                  "labels": json.dumps(joined.labels, sort_keys=True) if joined.labels else None}
        if held is None:
            conn.execute(sa.insert(host_identities).values(host=proof.host, created_at=now, **values))
        else:
            conn.execute(sa.update(host_identities).where(host_identities.c.host == proof.host).values(**values))
    log.info("host %s enrolled with key %s through join token %s: %s", proof.host, values["fingerprint"], token_id, state)
    return identity(store, proof.host)


def _usable(row: Any, host: str, now: datetime) -> JoinToken:
    """The join token ``row`` when ``host`` may use it now, else the Problem saying why not."""
    if row is None:
        raise Problem.one(ErrorCode.UNAUTHENTICATED, "the join token is not known to this server (never made here, or it "
                          "ended and was purged): make another (datum enroll create)")
    joined = _join(row)
    if joined.expires_at <= now:
        raise Problem.one(ErrorCode.UNAUTHENTICATED, f"the join token {joined.id} ended at {joined.expires_at.isoformat()}: "
                          "make another (datum enroll create)")
    if joined.used >= joined.uses:
        raise Problem.one(ErrorCode.UNAUTHENTICATED, f"the join token {joined.id} has been used ({joined.used} of "
                          f"{joined.uses} uses): make another (datum enroll create)")
    audit.fill(principal=f"join:{joined.id}", token=joined.id)  # who asks, in the request's audit row: a usable token
    if joined.host is not None and joined.host != host:
        raise Problem.one(ErrorCode.FORBIDDEN, f"the join token {joined.id} is for host {joined.host}, not {host}")
    if joined.pattern is not None and not fnmatch.fnmatchcase(host, joined.pattern):
        raise Problem.one(ErrorCode.FORBIDDEN, f"the name {host} does not match the join token's pattern {joined.pattern!r}")
    return joined


def _decided(held: Any, host: str, key: str, joined: JoinToken, hooked: bool) -> tuple[IdentityState, str]:
    """The identity's state and why, for a request through ``joined`` with ``key``; ``held`` the identity the
    name has (None: none yet). A name another key holds is refused unless the token says ``replace``."""
    if held is not None and held.public_key != key and not joined.replace:
        raise Problem.one(
            ErrorCode.CONFLICT,
            f"host {held.host} is enrolled with another key ({held.fingerprint}, {held.state}); the name is not taken "
            f"over: if this host was rebuilt, run datum host forget {held.host} on the server, or enroll with a join "
            "token made with --replace",
        )
    if held is not None and held.public_key == key and held.state == REVOKED:
        raise Problem.one(ErrorCode.FORBIDDEN, f"host {held.host} was revoked: datum host forget {held.host} first, to let it enroll again")
    if joined.host is not None:
        return ACTIVE, f"approved by the join token {joined.id} made for it"
    if held is not None and held.public_key == key and held.state in (ACTIVE, DENIED):
        return IdentityState(held.state), held.reason or held.state  # a pattern's token decides nothing about a name decided
    asker = "the approval hook ([enroll] approve), else " if hooked else ""
    return PENDING, f"through the join token {joined.id} for {joined.pattern!r}: waiting for {asker}datum enroll approve {host}"


def identity(store: Store, host: str) -> Identity:
    """The identity of ``host``, or NOT_FOUND."""
    with store.connect() as conn:
        row = conn.execute(sa.select(host_identities).where(host_identities.c.host == host)).first()
    if row is None:
        raise Problem.one(ErrorCode.NOT_FOUND, f"host {host} has not enrolled (datum enroll list shows who has)")
    return _identity(row)


def identities(store: Store, states: tuple[str, ...] = STATES) -> list[Identity]:
    """The identities in ``states``, in the order of ``IdentityState`` (pending first), then by name."""
    order = sa.case({s: i for i, s in enumerate(STATES)}, value=host_identities.c.state, else_=len(STATES))
    with store.connect() as conn:
        rows = conn.execute(
            sa.select(host_identities).where(host_identities.c.state.in_(states)).order_by(order, host_identities.c.host)
        ).all()
    return [_identity(r) for r in rows]


# -- a person's decisions -------------------------------------------------------------------------


def _decide(store: Store, host: str, now: datetime, state: IdentityState, reason: str) -> tuple[Identity, int]:
    """Move ``host``'s identity to ``state`` from one of the states it is entered from (``IdentityState.entered_from``);
    (it after, how many tokens ended: all its sessions unless ``state`` has them, and every agent token bound to the
    host too when ``state`` ends those)."""
    ended = 0
    with store.begin() as conn:
        row = conn.execute(sa.select(host_identities).where(host_identities.c.host == host)).first()
        if row is None:
            raise Problem.one(ErrorCode.NOT_FOUND, f"host {host} has not enrolled (datum enroll list shows who has)")
        if row.state != state:
            if row.state not in state.entered_from:
                raise Problem.one(ErrorCode.CONFLICT, f"host {host} is {row.state}: " + (
                    f"datum host forget {host}, then it enrolls again" if row.state == REVOKED else f"it cannot become {state}"))
            conn.execute(sa.update(host_identities).where(host_identities.c.host == host)
                         .values(state=state, reason=reason, changed_at=now))
        if not state.sessions:
            ended = _end_sessions(conn, host, bound_too=state.ends_bound_tokens)
            audit.fill(detail=f"{ended} tokens ended" if ended else None)
    return identity(store, host), ended


def approve(store: Store, host: str, now: datetime, by: str = "datum enroll approve") -> Identity:
    return _decide(store, host, now, ACTIVE, f"approved by {by}")[0]


def deny(store: Store, host: str, now: datetime, by: str = "datum enroll deny") -> tuple[Identity, int]:
    return _decide(store, host, now, DENIED, f"denied by {by}")


def revoke(store: Store, host: str, now: datetime, by: str = "datum host revoke") -> tuple[Identity, int]:
    """End every session of ``host`` and every agent token bound to it; it has no other until forgotten."""
    return _decide(store, host, now, REVOKED, f"revoked by {by}")


def forget(store: Store, host: str) -> tuple[Identity, int]:
    """Remove ``host``'s identity and end its sessions: the name may enroll again, with any key."""
    with store.begin() as conn:
        row = conn.execute(sa.select(host_identities).where(host_identities.c.host == host)).first()
        if row is None:
            raise Problem.one(ErrorCode.NOT_FOUND, f"host {host} has not enrolled (datum enroll list shows who has)")
        conn.execute(sa.delete(host_identities).where(host_identities.c.host == host))
        ended = _end_sessions(conn, host)
        audit.fill(detail=f"it was {row.state}" + (f"; {ended} tokens ended" if ended else ""))
    return _identity(row), ended


def _end_sessions(conn: sa.Connection, host: str, bound_too: bool = False) -> int:
    """Delete ``host``'s sessions (and, with ``bound_too``, every agent token bound to it): refused by every
    server within its re-check. How many."""
    which = tokens.c.session == sa.true()
    if bound_too:
        which = sa.or_(which, tokens.c.principal == AGENT)
    return int(conn.execute(sa.delete(tokens).where(tokens.c.host == host, which)).rowcount or 0)


# -- sessions -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Session:
    token: str
    expires_at: datetime
    ttl: timedelta


def session(store: Store, proof: Proof, now: datetime, ttl: timedelta) -> Session:
    """A bearer token bound to ``proof.host`` for ``ttl``, once its signature verifies with the host's key and the
    host is active; the host's sessions that ended are deleted meanwhile.

    The proof's nonce is taken in the session's own transaction (``nonces.take``), not in one before it: a
    renewal is one write transaction, and a proof is spent exactly when its session is stored. A proof
    refused for the host's state spends its nonce all the same (sent again once the host is active, it is
    still refused), as ``_spend`` says."""
    signature = _checked(store, proof, now)
    held = identity_or_none(store, proof.host)
    if held is None:
        raise Problem.one(ErrorCode.UNAUTHENTICATED, f"host {proof.host} has not enrolled, or was forgotten: enroll it "
                          "(datum enroll create on the server, datum agent enroll on the host)")
    public = unb64(held.public_key) or b""
    if not verified(public, signature, signed("session", proof.nonce, proof.host, proof.time)):
        raise Problem.one(ErrorCode.UNAUTHENTICATED, f"the signature does not verify with the key host {proof.host} "
                          f"enrolled with ({held.fingerprint})")
    audit.fill(principal=f"host:{proof.host}")  # proved by its key: who asks, in the request's audit row
    if held.state != ACTIVE:
        _spend(store, proof.nonce)
        raise Problem.one(ErrorCode.FORBIDDEN, f"host {proof.host} is {held.state}: {held.reason or 'no session'}")
    token = mint()
    expires = now + ttl
    audit.fill(detail=f"session {digest(token)[:ID_LENGTH]} until {expires.isoformat()}")  # its id, never the token
    with store.begin() as conn:
        if not nonces.take(conn, proof.nonce, _kept_until(proof.nonce)):
            raise _used()  # nothing written
        conn.execute(sa.delete(tokens).where(tokens.c.host == proof.host, tokens.c.session == sa.true(),
                                             tokens.c.expires_at <= now))
        state = conn.execute(sa.select(host_identities.c.state).where(
            host_identities.c.host == proof.host, host_identities.c.public_key == held.public_key)).scalar()
        if state != ACTIVE:  # the nonce is spent, but no session: the request's row goes with its 403
            audit.unchanged(conn)
        else:
            conn.execute(sa.insert(tokens).values(sha256=digest(token), principal=AGENT, host=proof.host,
                                                  session=True, created_at=now, expires_at=expires))
    if state != ACTIVE:  # revoked or forgotten meanwhile: committed without a session, the nonce spent
        raise Problem.one(ErrorCode.FORBIDDEN, f"host {proof.host} is no longer active")
    return Session(token, expires, ttl)


def identity_or_none(store: Store, host: str) -> Any:
    with store.connect() as conn:
        return conn.execute(sa.select(host_identities).where(host_identities.c.host == host)).first()

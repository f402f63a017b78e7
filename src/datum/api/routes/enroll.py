"""A host enrolls, and has sessions from its key, over HTTP (``datum agent enroll``, ``datum agent``).

Three routes that need no bearer token: a nonce to sign, an enrollment (the join
token in ``Authorization``, the host's public key and signature in the body) and
a session (the host's signature alone). Each proves its caller itself
(``security.own_proof``); the work is ``datum.fleet.enroll``'s. An enrollment and a session are acts
like any other in the audit log (``enroll:Enroll``, ``enroll:OpenSession`` on ``Host::"<name>"``): one row
each, written with the change (a refusal's with its answer), its principal what the request proved
(``join:<the join token's id>``, ``host:<name>``), never the join token, the proof or the session's token.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from datum.api.front.errors import error_responses
from datum.api.front.security import cedar_uid, own_proof, presented
from datum.api.front.state import state_of
from datum.api.models import Out
from datum.core.findings import ErrorCode, Problem
from datum.core.vocab import IdentityState
from datum.fleet import enroll as enrollment
from datum.store import audit
from datum.store.tokens import HOST_NAME
from datum.wire import Text, absent

router = APIRouter(tags=["enroll"])


class Nonce(Out):
    """What a host signs next, and the server's clock (a host far off it is refused, the offset named)."""

    nonce: str = Field(description="Good on every server of this store for 120 s.")
    server_time: datetime = Field(alias="serverTime")


class _Proof(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    host: str = Field(min_length=1, max_length=253, pattern=HOST_NAME,
                       description="The host's name: letters, digits and `_.-`, starting with a letter or digit.")
    nonce: Text = Field(min_length=1, max_length=100, description="From `GET /v1/enroll/nonce`.")
    time: int = Field(description="The host's clock, Unix seconds; more than 5 min off the server's is refused.")
    signature: Text = Field(min_length=1, max_length=200, description="Ed25519, URL-safe base64 (`datum.identity.signed`).")


class EnrollRequest(_Proof):
    """A host's request to enroll: its public key, its claimed facts, and its signature over (`enroll`, the nonce,
    its name, its clock, the join token's id, the public key)."""

    public_key: Text = Field(alias="publicKey", min_length=1, max_length=64, description="32 bytes, URL-safe base64.")
    facts: dict[str, Any] = Field(default_factory=dict, description="What the host says of itself: claims, shown to the approval hook.")


class SessionRequest(_Proof):
    """An enrolled host's signature over (`session`, the nonce, its name, its clock)."""


class Enrolled(Out):
    """The host's identity after the request: `active` (it may have sessions), `pending` (waiting for approval),
    `denied`."""

    host: str
    state: Literal[IdentityState.ACTIVE, IdentityState.PENDING, IdentityState.DENIED] = Field(
        description="`datum explain STATE` says what each means; a revoked host is refused (403).")
    fingerprint: str = Field(description="`sha256:` of the public key.")
    reason: str | SkipJsonSchema[None] = absent("Why it is in that state.")


class SessionAnswer(Out):
    """A bearer token bound to the host (principal `agent`), until `expiresAt`."""

    token: str
    expires_at: datetime = Field(alias="expiresAt")
    ttl_seconds: float = Field(alias="ttlSeconds")


def _proof(body: _Proof, public_key: str | None = None, facts: dict[str, Any] | None = None) -> enrollment.Proof:
    return enrollment.Proof(body.host, body.nonce, body.time, body.signature, public_key, facts or {})


@router.get("/v1/enroll/nonce", name="get_enroll_nonce", response_model=Nonce, response_model_by_alias=True,
            summary="A nonce for a host to sign (enrolling, or asking for a session). No token needed.",
            responses=error_responses(503))
def get_nonce(request: Request) -> Nonce:
    state = state_of(request)
    _registry, store = state.wired()
    now = state.clock()
    return Nonce(nonce=enrollment.nonce(store, now), serverTime=now)


@router.post(
    "/v1/enroll", name="enroll_host", response_model=Enrolled, response_model_by_alias=True,
    response_model_exclude_none=True,
    summary="A host enrolls with a join token (`Authorization: Bearer datum_j_...`) and its own key (datum agent enroll).",
    description=(
        "A join token made for the host approves it (`active`); one made for a pattern leaves it `pending` until the "
        "approval hook (`[enroll] approve`, asked after this answer) or `datum enroll approve` decides: the host asks "
        "again (a fresh nonce, the same key and join token) to learn the decision. A name another key holds is 409."
    ),
    responses=error_responses(401, 403, 409, 422, 503),
)
def enroll_host(request: Request, body: EnrollRequest) -> Enrolled:
    state = state_of(request)
    _registry, store = state.wired()
    audit.fill(resource=cedar_uid("Host", body.host))
    join = presented(request.scope)
    if join is None:
        raise Problem.one(ErrorCode.UNAUTHENTICATED, "enrolling needs the join token: 'Authorization: Bearer datum_j_...'")
    done = enrollment.enroll(
        store, _proof(body, body.public_key, body.facts), join, request.client.host if request.client else None,
        state.clock(), hooked=state.settings.enroll.approve is not None,
    )
    if done.state is IdentityState.PENDING and state.ask_approval is not None:
        state.ask_approval()  # the hook is asked on a thread of its own: this answer does not wait for it
    answered = done.state
    if answered is IdentityState.REVOKED:  # revoked by someone after the request was taken, before this answer
        raise Problem.one(ErrorCode.FORBIDDEN, f"host {done.host} was revoked: datum host forget {done.host} first, "
                          "to let it enroll again")
    return Enrolled(host=done.host, state=answered, fingerprint=done.fingerprint, reason=done.reason)


@router.post(
    "/v1/enroll/session", name="open_session", response_model=SessionAnswer, response_model_by_alias=True,
    summary="An enrolled host exchanges a signature by its key for a short-lived bearer token bound to it (datum agent).",
    responses=error_responses(401, 403, 422, 503),
)
def open_session(request: Request, body: SessionRequest) -> SessionAnswer:
    state = state_of(request)
    _registry, store = state.wired()
    audit.fill(resource=cedar_uid("Host", body.host))
    made = enrollment.session(store, _proof(body), state.clock(), state.settings.enroll.session_ttl)
    return SessionAnswer(token=made.token, expiresAt=made.expires_at, ttlSeconds=made.ttl.total_seconds())


own_proof(get_nonce)
own_proof(enroll_host, audit.ENROLL)
own_proof(open_session, audit.OPEN_SESSION)

"""Every HTTP error in the contract's one shape, ``{"issues": [...]}``, written by one function.

``written`` turns a ``Problem`` into the status and body of every error the
server answers: the routes' (through ``problem_response`` and the exception
handlers of ``datum.api.front.handlers``), the request guard's and the fast
answers' before any route, the edge's 500, even uvicorn's protocol-level 400,
414 and 431 (``datum.api.server``). Each body goes through ``public``, which
redacts whatever looks like a token. Here too: the error models the OpenAPI
document names (``Issues``) and the statuses each operation documents.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from fastapi import Response
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from datum.core.findings import ErrorCode as CoreCode
from datum.core.findings import Problem
from datum.core.redact import PREFIX, redacted

log = logging.getLogger("datum.api")

# What every code a finding carries is answered with (``datum.core.findings.ErrorCode``, where each code's
# status is written once); a code the CLI alone says (USAGE) is not among them.
STATUS_BY_CODE: dict[str, int] = {c.value: c.http_status for c in CoreCode if c.http_status is not None}

ErrorCode = StrEnum("ErrorCode", {code: code for code in STATUS_BY_CODE})  # type: ignore[misc]
ErrorCode.__doc__ = "Every code an HTTP error can carry; the status follows from it (400, 414 and 431 are INVALID_INPUT)."


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


class FieldErrorModel(BaseModel):
    """One field's problem: its path (empty for the whole request) and what is wrong with it."""

    model_config = ConfigDict(extra="forbid", title="FieldError")

    field: str = Field(description="The field's path, e.g. resources[2].File[x].mode; empty for the whole request.")
    message: str


class FindingModel(BaseModel):
    """One finding of a rejected request. Optional parts are absent, never null."""

    model_config = ConfigDict(extra="forbid", title="Finding")

    code: ErrorCode = Field(description="What kind of refusal; the HTTP status follows from it.")
    message: str = Field(description="What is wrong, for a human. Never a stack trace, never a token.")
    statement: int | SkipJsonSchema[None] = Field(
        default=None, json_schema_extra=_no_default,
        description="Index of the statement at fault; -1 for the document as a whole.",
    )
    action: str | SkipJsonSchema[None] = Field(
        default=None, json_schema_extra=_no_default, description="The Cedar action refused (FORBIDDEN)."
    )
    fields: list[FieldErrorModel] | SkipJsonSchema[None] = Field(
        default=None, json_schema_extra=_no_default, description="Each problem at its field (INVALID_INPUT)."
    )
    details: dict[str, Any] | SkipJsonSchema[None] = Field(
        default=None, json_schema_extra=_no_default,
        description="Structured facts, fixed per code: PAYLOAD_TOO_LARGE carries maxBodyBytes.",
    )


class Issues(BaseModel):
    """The contract's error shape: every finding at once."""

    model_config = ConfigDict(extra="forbid", title="Issues")

    issues: list[FindingModel] = Field(min_length=1)


# What ``datum token create`` mints, and what looks like one wherever it would be echoed or logged:
# decided once, in ``datum.core.redact`` (a failed command's output in a pass report uses it too).
TOKEN_PREFIX = PREFIX


def public(problem: Problem) -> dict[str, Any]:
    """``problem``'s JSON as it may leave the server: whatever in it looks like a token redacted
    (a path echoed in a message, a field or a detail: a token put in a URL by mistake)."""

    def scrub(value: Any) -> Any:
        if isinstance(value, str):
            return redacted(value)
        if isinstance(value, list):
            return [scrub(v) for v in value]
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items()}
        return value

    scrubbed: dict[str, Any] = scrub(problem.to_json())
    return scrubbed


def written(problem: Problem, status: int | None = None) -> tuple[int, bytes]:
    """The status and body of every error answer the server gives: ``problem`` through ``public``.

    ``status`` is the one its code calls for unless given (what uvicorn's
    protocol answers: 400, 414, 431; a framework's 415). A code the API does
    not publish is a bug here, not news for the client: ``500 INTERNAL``.
    """
    body = public(problem)
    known = STATUS_BY_CODE.get(problem.code)
    if known is None:
        log.error("a refusal with the unpublished code %s: %s", problem.code, problem)
        known, status = 500, None
        body = {"issues": [{**f, "code": CoreCode.INTERNAL} for f in body["issues"]]}
    return status or known, json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def problem_response(
    problem: Problem, headers: Mapping[str, str] | None = None, *, status: int | None = None, close: bool = False
) -> Response:
    """``problem`` as a response (an ASGI app too, for the layers before the routes): ``written``'s
    status and body, ``WWW-Authenticate`` on a 401, ``Connection: close`` when ``close``."""
    code, body = written(problem, status)
    extra = dict(headers or {})
    if code == 401:
        extra.setdefault("WWW-Authenticate", "Bearer")
    if close:
        extra["Connection"] = "close"
    return Response(body, code, extra or None, media_type="application/json")


INTERNAL = Problem.one(CoreCode.INTERNAL, "the server could not answer this request; see its log")


_ALLOW = {"Allow": {"description": "Every method the path answers, HEAD included where GET is.", "schema": {"type": "string"}}}
_RETRY = {"Retry-After": {"description": "Seconds to wait before asking again, on a read the server shed.", "schema": {"type": "string"}}}
_WWW = {"WWW-Authenticate": {"description": "`Bearer`: the scheme the API expects.", "schema": {"type": "string"}}}

# status -> (description, headers): the answers the server can give, in the error shape.
ERROR_STATUSES: dict[int, tuple[str, dict[str, Any]]] = {
    400: ("INVALID_INPUT: the request is not HTTP the server can parse (answered before routing).", {}),
    401: ("UNAUTHENTICATED: no or bad bearer token. A request with a body is refused before the body is read.", _WWW),
    403: ("FORBIDDEN: the Cedar policies refuse the action, named in `action`.", {}),
    404: ("NOT_FOUND: unknown reconciler, host, bucket or path.", {}),
    405: ("METHOD_NOT_ALLOWED: the path does not answer this method.", _ALLOW),
    408: ("REQUEST_TIMEOUT: the request body did not arrive within `[server] body_timeout`.", {}),
    409: ("CONFLICT: the request conflicts with the current state.", {}),
    413: ("PAYLOAD_TOO_LARGE: the body is larger than `[server] max_body_bytes` (`details.maxBodyBytes`).", {}),
    414: ("INVALID_INPUT: the request target (URL) is longer than the server reads.", {}),
    422: ("INVALID_INPUT: the input is not valid; each problem at its field.", {}),
    431: ("INVALID_INPUT: the request line and headers exceed 64 KiB.", {}),
    500: ("INTERNAL: the server could not answer; the detail is in its log, never in the body.", {}),
    503: (
        "UNAVAILABLE: the registry is not wired yet, the store cannot answer (named, with why), the fleet directory "
        "kept changing for 5 s (a manifest is never composed from a file half written), or the server is "
        "answering `[server] read_slots` reads at once and this one waited `[server] read_wait` (`Retry-After`).",
        _RETRY,
    ),
}

# Answers any operation can give: they come from the protocol and the guard, before any route.
EVERYWHERE = (400, 405, 408, 413, 414, 431, 500)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` entries documenting ``statuses`` with the error shape."""
    out: dict[int | str, dict[str, Any]] = {}
    for s in statuses:
        words, headers = ERROR_STATUSES[s]
        out[s] = {"model": Issues, "description": words, **({"headers": headers} if headers else {})}
    return out



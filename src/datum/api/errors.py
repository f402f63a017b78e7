"""Every HTTP error in the contract's one shape, ``{"issues": [...]}``, and never a stack trace.

A ``Problem`` raised anywhere below a route maps to its status through its
first finding's code; FastAPI's own validation errors become
``422 INVALID_INPUT`` with a finding per field; anything unexpected becomes a
generic ``500 INTERNAL`` whose detail goes to the log, not to the client.
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount

from datum.api.tokens import redacted
from datum.core.findings import FieldError, Finding, Problem
from datum.validation import field_path

log = logging.getLogger("datum.api")

STATUS_BY_CODE: dict[str, int] = {
    "UNAUTHENTICATED": 401,
    "FORBIDDEN": 403,
    "NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405,
    "REQUEST_TIMEOUT": 408,
    "CONFLICT": 409,
    "PAYLOAD_TOO_LARGE": 413,
    "INVALID_INPUT": 422,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
}

_CODE_BY_STATUS = {
    400: "INVALID_INPUT",
    401: "UNAUTHENTICATED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    408: "REQUEST_TIMEOUT",
    409: "CONFLICT",
    413: "PAYLOAD_TOO_LARGE",
    415: "INVALID_INPUT",
    422: "INVALID_INPUT",
    503: "UNAVAILABLE",
}


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


def problem_response(problem: Problem, headers: dict[str, str] | None = None) -> JSONResponse:
    """``problem`` as a JSON response with the status its code calls for."""
    status = STATUS_BY_CODE.get(problem.code)
    body = public(problem)
    if status is None:  # a code the API does not publish is a bug here, not news for the client
        log.error("a refusal with the unpublished code %s: %s", problem.code, problem)
        status = 500
        body = {"issues": [{**f, "code": "INTERNAL"} for f in body["issues"]]}
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer", **(headers or {})}
    return JSONResponse(body, status_code=status, headers=headers)


_ALLOW = {"Allow": {"description": "Every method the path answers, HEAD included where GET is.", "schema": {"type": "string"}}}
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
    503: ("UNAVAILABLE: the registry is not wired yet, or the store cannot answer (named, with why).", {}),
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


_METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route answers at the request's path (not only the first route's): the ``Allow`` header."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, Mount):  # static files: GET (and HEAD)
            if route.matches(request.scope)[0] != Match.NONE:
                methods.add("GET")
            continue
        for method in _METHOD_ORDER:
            if method not in methods and route.matches({**request.scope, "method": method})[0] == Match.FULL:
                methods.add(method)
    if "GET" in methods:
        methods.add("HEAD")  # Edge answers HEAD wherever GET is
    return sorted(methods, key=_METHOD_ORDER.index)


_SOURCES = frozenset({"body", "path", "query", "header", "cookie"})


def _validation_problem(exc: RequestValidationError) -> Problem:
    fields = []
    for err in exc.errors():
        # loc starts with where the value came from (body, path, query, header): the field is the rest.
        loc = list(err.get("loc", ()))
        if loc and loc[0] in _SOURCES:
            loc = loc[1:]
        if err.get("type") == "json_invalid":
            # loc is a character offset into the body, not a field: the whole body is at fault.
            ctx = err.get("ctx") or {}
            why = f": {ctx['error']}" if ctx.get("error") else ""
            fields.append(FieldError("", f"the body is not valid JSON{why}"))
            continue
        message = "unknown field" if err.get("type") == "extra_forbidden" else str(err.get("msg", "invalid"))
        fields.append(FieldError(field_path(loc), message))
    return Problem([Finding("INVALID_INPUT", "the request is not valid", fields=tuple(fields))])


def install(app: FastAPI) -> None:
    """Register the handlers that keep every error in the contract's shape."""

    @app.exception_handler(Problem)
    async def _problem(_request: Request, exc: Problem) -> JSONResponse:
        return problem_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI reads the body before any dependency runs: authenticate first
        # here, so a caller without a valid token learns 401, not what the body lacks.
        if request.url.path.startswith("/v1/"):
            from datum.api.security import authenticate

            try:  # may ask the store: off the event loop
                await anyio.to_thread.run_sync(authenticate, request)
            except Problem as problem:
                return problem_response(problem)
        return problem_response(_validation_problem(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _CODE_BY_STATUS.get(exc.status_code, "INVALID_INPUT" if exc.status_code < 500 else "INTERNAL")
        message = exc.detail if isinstance(exc.detail, str) else "the request cannot be served"
        headers = dict(getattr(exc, "headers", None) or {})
        path = redacted(request.url.path[:200])
        if exc.status_code == 404 and message == "Not Found":
            message = (
                f"no such path: {path}; GET /v1 lists the API's endpoints "
                "(and /docs, /openapi.json document them)"
            )
        elif exc.status_code == 405:
            allow = allowed_methods(request)
            headers["Allow"] = ", ".join(allow)
            message = f"{path} answers {', '.join(allow)}, not {request.method}"
        # A body that does not parse is invalid input like any other: 422, as the contract says.
        status = 422 if exc.status_code == 400 else exc.status_code
        return JSONResponse(
            {"issues": [{"code": code, "message": message}]},
            status_code=status,
            headers=headers or None,
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # The detail goes to the log (never the request's headers: they carry the token).
        log.error("unexpected error serving %s %s", request.method, redacted(request.url.path), exc_info=exc)
        return JSONResponse(
            {"issues": [{"code": "INTERNAL", "message": "the server could not answer this request; see its log"}]},
            status_code=500,
        )

"""FastAPI's exception handlers: whatever a route or the framework raises answers in the contract's shape.

A ``Problem`` raised anywhere below a route maps to its status through its
first finding's code; FastAPI's own validation errors become ``422
INVALID_INPUT`` with a finding per field; Starlette's 404 and 405 name the
path (and ``Allow``); anything unexpected becomes a generic ``500 INTERNAL``
whose detail goes to the log. Each is written by ``datum.api.front.errors.written``.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount

from datum.api.front.errors import INTERNAL, problem_response, redacted
from datum.core.findings import ErrorCode, FieldError, Finding, Problem
from datum.validation import field_path

log = logging.getLogger("datum.api")

# The code of an HTTP status the framework answers with (each code's status written once: ErrorCode); 400 and 415
# are input the server cannot take.
_CODE_BY_STATUS = {c.http_status: c.value for c in ErrorCode if c.http_status is not None} | {
    400: ErrorCode.INVALID_INPUT.value, 415: ErrorCode.INVALID_INPUT.value,
}

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
    return Problem([Finding(ErrorCode.INVALID_INPUT, "the request is not valid", fields=tuple(fields))])


def install(app: FastAPI) -> None:
    """Register the handlers that keep every error in the contract's shape, each answered by ``problem_response``."""

    @app.exception_handler(Problem)
    async def _problem(_request: Request, exc: Problem) -> Response:
        return problem_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> Response:
        # FastAPI reads the body before any dependency runs; the request guard admitted the request
        # (401, 403) before that, so a caller without a valid token never learns what the body lacks.
        return problem_response(_validation_problem(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        code = _CODE_BY_STATUS.get(exc.status_code, ErrorCode.INVALID_INPUT if exc.status_code < 500 else ErrorCode.INTERNAL)
        message = exc.detail if isinstance(exc.detail, str) else "the request cannot be served"
        headers = dict(getattr(exc, "headers", None) or {})
        path = request.url.path[:200]
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
        return problem_response(Problem.one(code, message), headers, status=status)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        # The detail goes to the log (never the request's headers: they carry the token).
        log.error("unexpected error serving %s %s", request.method, redacted(request.url.path), exc_info=exc)
        return problem_response(INTERNAL)

"""Every HTTP error in the contract's one shape, ``{"issues": [...]}``, and never a stack trace.

A ``Problem`` raised anywhere below a route maps to its status through its
first finding's code; FastAPI's own validation errors become
``422 INVALID_INPUT`` with a finding per field; anything unexpected becomes a
generic ``500 INTERNAL`` whose detail goes to the log, not to the client.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

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


class FieldErrorModel(BaseModel):
    """One field's problem: its path (empty for the whole request) and what is wrong with it."""

    field: str
    message: str


class FindingModel(BaseModel):
    """One finding of a rejected request."""

    model_config = ConfigDict(extra="allow")

    code: str = Field(
        description="UNAUTHENTICATED, FORBIDDEN, NOT_FOUND, INVALID_INPUT, CONFLICT, PAYLOAD_TOO_LARGE, "
        "REQUEST_TIMEOUT, UNAVAILABLE, INTERNAL."
    )
    message: str
    statement: int | None = Field(default=None, description="Index of the statement at fault; -1 for the document as a whole.")
    action: str | None = Field(default=None, description="The Cedar action refused (FORBIDDEN).")
    fields: list[FieldErrorModel] | None = None
    details: dict[str, Any] | None = None


class Issues(BaseModel):
    """The contract's error shape: every finding at once."""

    issues: list[FindingModel]


def problem_response(problem: Problem, headers: dict[str, str] | None = None) -> JSONResponse:
    """``problem`` as a JSON response with the status its code calls for."""
    status = STATUS_BY_CODE.get(problem.code, 500)
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer", **(headers or {})}
    return JSONResponse(problem.to_json(), status_code=status, headers=headers)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` entries documenting ``statuses`` with the error shape."""
    words = {
        401: "No or bad bearer token.",
        403: "The Cedar policies refuse the action (named in `action`).",
        404: "Unknown reconciler, host or bucket.",
        409: "The request conflicts with the current state.",
        413: "The body is larger than `[server] max_body_bytes` (PAYLOAD_TOO_LARGE).",
        422: "The input is not valid; each problem at its field.",
        503: "Not ready: the registry or the store is not wired yet.",
    }
    return {s: {"model": Issues, "description": words.get(s, "Error.")} for s in statuses}


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

            try:
                authenticate(request)
            except Problem as problem:
                return problem_response(problem)
        return problem_response(_validation_problem(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _CODE_BY_STATUS.get(exc.status_code, "INVALID_INPUT" if exc.status_code < 500 else "INTERNAL")
        message = exc.detail if isinstance(exc.detail, str) else "the request cannot be served"
        # A body that does not parse is invalid input like any other: 422, as the contract says.
        status = 422 if exc.status_code == 400 else exc.status_code
        return JSONResponse(
            {"issues": [{"code": code, "message": message}]},
            status_code=status,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # The detail goes to the log (never the request's headers: they carry the token).
        log.error("unexpected error serving %s %s", request.method, request.url.path, exc_info=exc)
        return JSONResponse(
            {"issues": [{"code": "INTERNAL", "message": "the server could not answer this request; see its log"}]},
            status_code=500,
        )

"""The contract's one error shape: a list of findings, each at its field where it has one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


@dataclass(frozen=True, slots=True)
class FieldError:
    """One field's problem: its path and what is wrong with it."""

    field: str
    message: str


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem with a request, a document or the state of the system."""

    code: str
    message: str
    fields: tuple[FieldError, ...] = ()
    statement: int | None = None
    action: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The finding as the contract spells it; absent parts are absent, not null."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.statement is not None:
            out["statement"] = self.statement
        if self.action is not None:
            out["action"] = self.action
        if self.fields:
            out["fields"] = [{"field": f.field, "message": f.message} for f in self.fields]
        if self.details:
            out["details"] = dict(self.details)
        return out


class ErrorCode(StrEnum):
    """Every code a finding carries, with what it means everywhere (as httpx's ``codes`` carry their phrases):
    the HTTP status the API answers it with, the exit status the CLI ends with, and its description. The API's
    status by code (and code by status), the CLI's exit status by code and the published error codes all
    derive from here; adding a code is adding a member and its row in ``_MEANS``."""

    USAGE = "USAGE"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    FORBIDDEN = "FORBIDDEN"
    NOT_FOUND = "NOT_FOUND"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    REQUEST_TIMEOUT = "REQUEST_TIMEOUT"
    CONFLICT = "CONFLICT"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    INVALID_INPUT = "INVALID_INPUT"
    INTERNAL = "INTERNAL"
    UNAVAILABLE = "UNAVAILABLE"

    @property
    def http_status(self) -> int | None:
        """The status the API answers it with; None for a code only the command line says (``USAGE``)."""
        return _MEANS[self][0]

    @property
    def exit_status(self) -> int:
        """The status a command ends with when it is the first finding (sysexits: 64, 65, 69, 70)."""
        return _MEANS[self][1]

    @property
    def description(self) -> str:
        return _MEANS[self][2]

    @classmethod
    def exit_of(cls, code: str) -> int:
        """The exit status of ``code``: a code of no member (a plugin's) is an internal error's."""
        return cls(code).exit_status if code in cls._value2member_map_ else EXIT_SOFTWARE


# sysexits.h: the exit statuses a finding can end a command with (77, EX_NOPERM: a server, asked with --server,
# refused the token or Cedar the action)
EXIT_USAGE, EXIT_INVALID, EXIT_UNAVAILABLE, EXIT_SOFTWARE, EXIT_REFUSED = 64, 65, 69, 70, 77

_MEANS: dict[ErrorCode, tuple[int | None, int, str]] = {
    ErrorCode.USAGE: (None, EXIT_USAGE, "a bad option or argument"),
    ErrorCode.UNAUTHENTICATED: (401, EXIT_REFUSED, "no or bad bearer token"),
    ErrorCode.FORBIDDEN: (403, EXIT_REFUSED, "the Cedar policies refuse the action, named in `action`"),
    ErrorCode.NOT_FOUND: (404, EXIT_USAGE, "unknown reconciler, host, bucket, rollout or path"),
    ErrorCode.METHOD_NOT_ALLOWED: (405, EXIT_USAGE, "the path does not answer this method"),
    ErrorCode.REQUEST_TIMEOUT: (408, EXIT_UNAVAILABLE, "the request body did not arrive in time"),
    ErrorCode.CONFLICT: (409, EXIT_INVALID, "the request conflicts with the current state"),
    ErrorCode.PAYLOAD_TOO_LARGE: (413, EXIT_INVALID, "the body is larger than the server takes"),
    ErrorCode.INVALID_INPUT: (422, EXIT_INVALID, "the input is not valid; each problem at its field"),
    ErrorCode.INTERNAL: (500, EXIT_SOFTWARE, "the server could not answer; the detail is in its log"),
    ErrorCode.UNAVAILABLE: (503, EXIT_UNAVAILABLE, "the store, the server or the fleet directory cannot answer now"),
}


class Problem(Exception):
    """An error that carries findings in the contract's shape.

    ``code`` of the first finding classifies it: ``INVALID_INPUT``,
    ``NOT_FOUND``, ``CONFLICT``, ``UNAVAILABLE``, ``USAGE``, ...
    """

    def __init__(self, findings: Iterable[Finding]) -> None:
        self.findings = tuple(findings)
        if not self.findings:
            raise ValueError("a Problem needs at least one finding")
        super().__init__("; ".join(f.message for f in self.findings))

    @property
    def code(self) -> str:
        return self.findings[0].code

    @classmethod
    def one(cls, code: str, message: str, **kw: Any) -> Problem:
        """A problem of a single finding."""
        return cls([Finding(code, message, **kw)])

    def to_json(self) -> dict[str, Any]:
        return {"issues": [f.to_json() for f in self.findings]}

    def plain(self) -> str:
        """Every finding on one line, each with its fields: where a single text must say it all (an ``error``)."""
        return "; ".join(
            f.message + (f" ({', '.join(f'{e.field}: {e.message}' for e in f.fields)})" if f.fields else "")
            for f in self.findings
        )


def invalid(fields: Iterable[FieldError], message: str = "the input is not valid") -> Problem:
    """An INVALID_INPUT problem listing every field finding at once."""
    return Problem([Finding(ErrorCode.INVALID_INPUT, message, fields=tuple(fields))])

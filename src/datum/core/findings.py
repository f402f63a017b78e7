"""The contract's one error shape: a list of findings, each at its field where it has one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
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
    return Problem([Finding("INVALID_INPUT", message, fields=tuple(fields))])

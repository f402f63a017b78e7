"""Turn pydantic validation errors into the contract's findings, each at its field path."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from datum.core.findings import FieldError


def field_path(loc: Sequence[int | str], prefix: str = "") -> str:
    """``("resources", 2, "mode")`` -> ``resources[2].mode``."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def field_errors(exc: ValidationError, prefix: str = "") -> list[FieldError]:
    """Every error pydantic found, at its field."""
    found = []
    for err in exc.errors(include_url=False):
        # "[key]": a mapping's key was refused; the finding is at the key, as at its value.
        loc = [p for p in err["loc"] if not (isinstance(p, str) and (p.startswith("function-") or p == "[key]"))]
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        found.append(FieldError(field_path(loc, prefix), message))
    return found

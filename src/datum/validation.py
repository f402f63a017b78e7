"""Turn pydantic validation errors into the contract's findings, each at its field path."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


def model_errors(exc: ValidationError, model: type[Any]) -> list[FieldError]:
    """Every error pydantic found validating ``model``, once per field, said in the model's own words.

    A finding is at its field path (a union's member names, ``Tag``s, taken out of it) and says what the
    field is, in its description (the text the JSON Schema carries): ``required: `` and that when it is
    missing, ``unknown field`` for one the model does not have. So a document's model is its one
    statement of what each field takes, for the validator, the schema and the operator reading a finding.
    """
    found: dict[str, FieldError] = {}
    for err in exc.errors(include_url=False):
        loc, said = _described(model, [p for p in err["loc"] if not _internal(p)])
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        elif err["type"] == "missing":
            message = f"required: {said}" if said else err["msg"]
        else:
            message = said or err["msg"]
        path = field_path(loc)
        found.setdefault(path, FieldError(path, message))
    return list(found.values())


def _internal(part: int | str) -> bool:
    return isinstance(part, str) and (part.startswith("function-") or part == "[key]")


def _described(model: type[Any], loc: Sequence[int | str]) -> tuple[list[int | str], str | None]:
    """``loc`` without union tags, and the description of the deepest field (or annotated type) on it."""
    from types import NoneType, UnionType
    from typing import Annotated, Union, get_args, get_origin

    from pydantic import BaseModel, Tag
    from pydantic.fields import FieldInfo

    said: str | None = None

    def absorb(tp: Any) -> Any:
        nonlocal said
        while True:
            if get_origin(tp) is Annotated:
                tp, *meta = get_args(tp)
                said = next((m.description for m in meta if isinstance(m, FieldInfo) and m.description), said)
            elif get_origin(tp) in (Union, UnionType) and len([a for a in get_args(tp) if a is not NoneType]) == 1:
                tp = next(a for a in get_args(tp) if a is not NoneType)
            else:
                return tp

    def tagged(tp: Any, part: int | str) -> Any:
        for member in get_args(tp):
            if get_origin(member) is Annotated and any(isinstance(m, Tag) and m.tag == part for m in get_args(member)[1:]):
                return member
        return None

    clean: list[int | str] = []
    tp: Any = model
    for part in loc:
        tp = absorb(tp)
        origin = get_origin(tp)
        if origin in (Union, UnionType):
            tp = tagged(tp, part)  # a member's tag: not a field
            if tp is not None:
                continue
        clean.append(part)
        if isinstance(tp, type) and issubclass(tp, BaseModel) and isinstance(part, str) and part in tp.model_fields:
            field = tp.model_fields[part]
            said = field.description or said
            tp = field.annotation
        elif origin is list and get_args(tp):
            tp = get_args(tp)[0]
        elif origin is dict and get_args(tp):
            tp = get_args(tp)[1]
        else:
            tp = Any
    absorb(tp)
    return clean, said

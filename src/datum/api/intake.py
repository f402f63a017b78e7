"""What the server accepts from an agent's pass report before it stores it.

Pydantic has already checked the shape; this checks what a shape cannot say:

- every number is finite (JSON parsers take ``NaN``, ``Infinity`` and ``1e999``);
- the report's ``state`` is the host state its resources roll up to (contract
  section 2), so a ``converged`` report with a failed resource is refused; a
  pass stopped by a signal (``incomplete``) may say ``unknown``;
- a diff longer than ``[server] max_diff_bytes`` is cut, with a marker saying so;
- the diff of a resource the report marks sensitive is never stored;
- a NUL in a string (an error, a diff) is stored as U+FFFD: PostgreSQL's ``jsonb`` cannot hold one,
  and the report is the same on SQLite (a host name holding one is refused: it is a key).
"""

from __future__ import annotations

import json
import math
from typing import Any

from datum.api.models import redacted
from datum.core.findings import FieldError, invalid
from datum.core.rollup import host_state
from datum.core.vocab import HostState
from datum.host.report import PassReport
from datum.validation import field_path


def _non_finite(value: Any, path: list[str | int]) -> list[FieldError]:
    if isinstance(value, float) and not math.isfinite(value):
        return [FieldError(field_path(path), f"{value} is not a finite number")]
    if isinstance(value, dict):
        return [e for k, v in value.items() for e in _non_finite(v, [*path, str(k)])]
    if isinstance(value, list | tuple):
        return [e for i, v in enumerate(value) for e in _non_finite(v, [*path, i])]
    return []


def truncated(diff: str, limit: int) -> str:
    """``diff`` cut to at most ``limit`` UTF-8 bytes, with the marker, when it is longer."""
    data = diff.encode("utf-8")
    if len(data) <= limit:
        return diff
    kept = data[:limit].decode("utf-8", "ignore")
    return f"{kept}\n... (diff truncated at {limit} bytes)\n"


def _text(doc: dict[str, Any]) -> str | None:
    """``doc`` (a JSON-form dump, which keeps ``inf``) as JSON text, or None when a number is not finite."""
    try:
        return json.dumps(doc, allow_nan=False, separators=(",", ":"))
    except ValueError:
        return None


def accept(report: PassReport, max_diff_bytes: int) -> PassReport:
    """``report`` as the server stores it, or ``422 INVALID_INPUT`` naming every field at fault."""
    return accepted(report, max_diff_bytes)[0]


def _without_nul(value: Any) -> Any:
    """``value`` (a JSON form) with every NUL of its strings, keys included, replaced by U+FFFD."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    return value


def accepted(report: PassReport, max_diff_bytes: int) -> tuple[PassReport, dict[str, Any], str]:
    """``accept``, with the report's JSON form (``PassReport.dump``) and its text, made once for the check,
    the store and the answer."""
    doc = report.dump()
    text = _text(doc)
    if text is not None and "\\u0000" in text:  # json.dumps writes a NUL so: the one-pass check
        report = PassReport.model_validate(_without_nul(doc))
        doc = report.dump()
        text = _text(doc)
    # the walk that names each field only when the one-pass check found something
    problems = [] if text is not None else _non_finite(report.model_dump(by_alias=True), [])
    states = [r.state for r in report.resources]
    awaiting = report.reboot is not None and report.reboot.required
    expected = host_state(states, awaiting_reboot=awaiting)
    # A pass stopped by a signal reports what it reached so far and says ``unknown`` (its agent's rule).
    stopped = bool(getattr(report, "incomplete", False)) and report.state is HostState.UNKNOWN
    if report.state != expected and not stopped:
        problems.append(
            FieldError(
                "state",
                f"the report says {report.state.value!r} but its resources roll up to {expected.value!r}",
            )
        )
    if problems:
        raise invalid(problems, "the pass report does not hold together")
    kept = report
    report = redacted(report)
    if any(r.diff and len(r.diff) * 4 > max_diff_bytes for r in report.resources):
        report = report.model_copy(
            update={
                "resources": [
                    r.model_copy(update={"diff": truncated(r.diff, max_diff_bytes)}) if r.diff else r
                    for r in report.resources
                ]
            }
        )
    if report is not kept:
        doc = report.dump()
        text = json.dumps(doc, separators=(",", ":"))
    return report, doc, text if text is not None else json.dumps(doc)  # not None: checked above

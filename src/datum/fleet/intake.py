"""Taking one reported pass: what the server accepts of it, and storing it with its history row.

``take`` is the one code path of the pass route and its fast answer
(``datum.api.routes.hosts``, which say the answer in HTTP), in a worker thread
with a report pydantic has already checked the shape of. It checks the host,
accepts the report, stores it (``datum.store.hosts.take_pass``, with the group
``nodes.yaml`` gives the host by its name and labels: never by the facts its
agent sends, which are claims), counts it (``counters``) and, when a pass on the rolling
revision was stored, lets the rollout move on
(``datum.fleet.rollouts.machine.after_pass``).

What a shape cannot say, checked before a report is stored:

- every number is finite (JSON parsers take ``NaN``, ``Infinity`` and ``1e999``);
- the report's ``state`` is the host state its resources roll up to (contract
  section 2), so a ``converged`` report with a failed resource is refused; a
  pass stopped by a signal (``incomplete``) may say ``unknown``; a host back
  from a reboot whose ``health`` did not pass is ``degraded`` (an agent older
  than that rule says ``converged``: stored as ``degraded``, saying why);
- a diff longer than ``[server] max_diff_bytes`` is cut, with a marker saying so;
- the diff of a resource the report marks sensitive is never stored;
- a NUL in a string (an error, a diff) is stored as U+FFFD: PostgreSQL's ``jsonb`` cannot hold one,
  and the report is the same on SQLite (a host name holding one is refused: it is a key).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from datum.core.budget import unhealthy
from datum.core.findings import FieldError, invalid
from datum.core.redact import NOT_A_HOST_NAME, looks_like_token
from datum.core.rollup import host_state
from datum.core.vocab import HostState
from datum.fleet.reboots import intake_group
from datum.fleet.rollouts.machine import after_pass
from datum.fleet.server import FleetServer
from datum.host.report import PassReport, ResourceReport
from datum.store.hosts import Taken, take_pass
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


REDACTED = "(diff redacted: the resource is sensitive)"


def sensitive(resource: ResourceReport) -> bool:
    """Whether the report marks ``resource`` sensitive (its diff is never stored nor served)."""
    return bool(getattr(resource, "sensitive", False) or getattr(resource, "redacted", False))


def redacted(report: PassReport) -> PassReport:
    """``report`` with the diff of every sensitive resource replaced by a marker (stored ones included)."""
    if not any(r.diff not in (None, REDACTED) and sensitive(r) for r in report.resources):
        return report
    resources = [
        r.model_copy(update={"diff": REDACTED}) if r.diff is not None and sensitive(r) else r
        for r in report.resources
    ]
    return report.model_copy(update={"resources": resources})


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
    sick = unhealthy(report.health.model_dump() if report.health is not None else None)
    expected = host_state(states, awaiting_reboot=awaiting, unhealthy=sick is not None)
    # A pass stopped by a signal reports what it reached so far and says ``unknown`` (its agent's rule).
    stopped = bool(getattr(report, "incomplete", False)) and report.state is HostState.UNKNOWN
    if sick is not None and report.state is HostState.CONVERGED and expected is HostState.DEGRADED:
        # an agent older than the rule says converged while its health check fails: the server's rollup decides
        report = report.model_copy(update={"state": expected, "reason": sick})
        doc = report.dump()
        text = _text(doc)
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


@dataclass(frozen=True, slots=True)
class Received:
    """What became of one reported pass: the store's ``taken`` (outcome, the host's row), and the report as it
    was accepted (redacted, its diffs cut) with its JSON text, which the answer is built from."""

    taken: Taken
    report: PassReport
    text: str


def check_host(report: PassReport, host: str) -> None:
    """``422`` unless the report is for the host of the path, and that name is not shaped like a token."""
    if looks_like_token(host):
        raise invalid(
            [FieldError("host", NOT_A_HOST_NAME)],
            "a pass is not taken for a host named like a token",
        )
    if report.host != host:
        raise invalid(
            [FieldError("host", f"the report is for host {report.host!r}, the path names {host!r}")],
            "a pass can only be reported for the host it ran on",
        )


def take(server: FleetServer, host: str, report: PassReport) -> Received:
    """Accept ``report`` (``422`` naming every field at fault) and store it. Blocks on the store, which must
    be wired (the caller answers ``503`` before). The group recorded is the host's by its name and labels
    (``datum.fleet.reboots.intake_group``); a ``nodes.yaml`` that does not validate keeps the stored one.
    """
    store = server.store
    assert store is not None
    started = time.perf_counter()
    check_host(report, host)
    report, doc, text = accepted(report, server.settings.server.max_diff_bytes)
    # with the page's history strip (not for a pass re-sent), in the same statement on PostgreSQL
    taken = take_pass(
        store, host, doc, history=True, text=text,
        # back from a reboot: its lease frees the group's slot, in the same transaction (statement, on PostgreSQL)
        release_lease=True,
        group=intake_group(server.settings.fleet.manifests, host, server.labels.of(host)),
    )
    server.intake.took(taken.outcome, time.perf_counter() - started)
    if taken.outcome == "stored":
        after_pass(server, report.revision)  # a host on the rolling revision: the rollout may move on
    return Received(taken, report, text)


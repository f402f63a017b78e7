"""Taking one reported pass: accept it, store it with its history row, answer with the host's status.

One code path for the route (``POST /v1/hosts/{host}/passes``) and the intake
fast answer (``datum.api.routes.hosts.report_pass_now``): both call ``take`` in a
worker thread, with a report already validated.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from datum.api.front.state import ServerState
from datum.api.intake import accepted
from datum.api.models import host_status
from datum.core.findings import FieldError, invalid
from datum.core.redact import looks_like_token
from datum.fleet.reboots import intake_group
from datum.host.report import PassReport
from datum.store.hosts import take_pass


@dataclass(frozen=True)
class Answer:
    """The HTTP answer to a reported pass: 201 stored, 200 not (``Datum-Pass: duplicate`` or ``older``)."""

    status: int
    body: bytes
    outcome: str


def check_host(report: PassReport, host: str) -> None:
    """``422`` unless the report is for the host of the path, and that name is not shaped like a token."""
    if looks_like_token(host):
        raise invalid(
            [FieldError("host", "is shaped like a bearer token; a host name never is one")],
            "a pass is not taken for a host named like a token",
        )
    if report.host != host:
        raise invalid(
            [FieldError("host", f"the report is for host {report.host!r}, the path names {host!r}")],
            "a pass can only be reported for the host it ran on",
        )


def take(state: ServerState, host: str, report: PassReport, facts: bytes | str | None = None) -> Answer:
    """Accept ``report`` (``422`` naming every field at fault), store it, answer. Blocks on the store.

    ``facts``: the request's ``X-Datum-Facts`` header, what the host's group is recorded from (with its name);
    one that does not read keeps the stored group, it never refuses the report.
    """
    _registry, store = state.wired()
    started = time.perf_counter()
    check_host(report, host)
    report, doc, text = accepted(report, state.settings.server.max_diff_bytes)
    # with the page's history strip (not for a pass re-sent), in the same statement on PostgreSQL
    taken = take_pass(
        store, host, doc, history=True, text=text,
        # back from a reboot: its lease frees the group's slot, in the same transaction (statement, on PostgreSQL)
        release_lease=True,
        group=intake_group(state.settings.fleet.manifests, host, _facts(facts)),
    )
    state.intake.took(taken.outcome, time.perf_counter() - started)
    if taken.outcome == "stored" and state.after_pass is not None:
        state.after_pass(report.revision)  # a host on the rolling revision: the rollout may move on
    if taken.outcome != "stored":  # the same pass again, or one older than the stored: kept as it was
        return Answer(200, host_status(taken.row).model_dump_json(by_alias=True, exclude_none=True).encode(), taken.outcome)
    # The report was validated once, on the way in: the answer is built from it, not read back nor
    # validated again, and its report is the text just stored, not serialized again.
    head = host_status(taken.row, parsed=report).model_dump_json(by_alias=True, exclude_none=True, exclude={"report"})
    return Answer(201, f'{head[:-1]},"report":{text}}}'.encode(), taken.outcome)


def _facts(header: bytes | str | None) -> dict[str, Any] | None:
    """The facts an ``X-Datum-Facts`` header carries (none when absent), or None when they do not read."""
    if header is None:
        return {}
    try:
        facts = json.loads(header)
    except ValueError:
        return None
    return facts if isinstance(facts, dict) else None

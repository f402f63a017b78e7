"""Delivering spooled pass reports to the server, oldest first, with the standard library only."""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

from datum.bounded import DEADLINE, Unusable, request
from datum.host.remote import issues_in
from datum.trust import Trust

# Answers that will never change for this report: it is dropped (and said so), not retried forever.
_PERMANENT = {400, 404, 413, 422}


@dataclass(frozen=True)
class Sent:
    ok: bool
    why: str | None = None
    permanent: bool = False


def post(
    server: str, host: str, report: dict[str, Any], token: str, deadline: float = DEADLINE,
    facts: dict[str, Any] | None = None, trust: Trust | None = None,
) -> Sent:
    """``POST`` one report; taken when the server answers 2xx within ``deadline`` seconds (its body is not
    read). Anything else (no answer, a slow or cut one, a redirect, an error) keeps it for the next delivery,
    but for an answer that will never change (``_PERMANENT``). ``facts`` go in ``X-Datum-Facts``, as with the
    manifest request: the server records the host's group from them."""
    url = f"{server.rstrip('/')}/v1/hosts/{urllib.parse.quote(host, safe='')}/passes"
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    if facts is not None:
        headers["X-Datum-Facts"] = json.dumps(facts, separators=(",", ":"), default=str)
    try:
        answer = request("POST", url, headers, data=json.dumps(report).encode(), deadline=deadline, trust=trust)
    except Unusable as exc:
        return Sent(False, str(exc))
    if 200 <= answer.status < 300:
        return Sent(True)
    why = f"{url} answered {answer.status} {answer.reason}{issues_in(answer.body)}"
    return Sent(False, why, answer.status in _PERMANENT)


@dataclass(frozen=True)
class Flushed:
    delivered: int
    dropped: int
    left: int
    why: str | None  # why delivery stopped, when it did


def flush(
    state: Any, server: str, host: str, token: str, deadline: float = DEADLINE, facts: dict[str, Any] | None = None,
    trust: Trust | None = None,
) -> Flushed:
    """Send every spooled report in sequence order, with the host's ``facts`` now; stop at the first the server
    does not take."""
    delivered = dropped = 0
    dropped += state.trim()
    pending = state.pending()
    for i, (seq, report) in enumerate(pending):
        sent = post(server, host, report, token, deadline, facts, trust)
        if sent.ok:
            state.delivered(seq)
            delivered += 1
        elif sent.permanent:
            state.delivered(seq)
            dropped += 1
        else:
            return Flushed(delivered, dropped, len(pending) - i, sent.why)
    return Flushed(delivered, dropped, 0, None)

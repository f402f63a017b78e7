"""Posting a pass report to a Datum server (``datum apply --report-to``), and reading the messages
of an error answer in the contract's shape; the standard library only (no HTTP client import)."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from datum.bounded import DEADLINE, Unusable, request
from datum.trust import Trust


def issues_in(body: bytes) -> str:
    """The messages of an error answer's body in the contract's shape, as ``": msg; msg"``; "" when it has none."""
    try:
        issues = json.loads(body).get("issues") or []
        return ": " + "; ".join(str(i.get("message")) for i in issues)[:2000]
    except (ValueError, AttributeError, TypeError, RecursionError):
        return ""


def post_report(
    base_url: str, host: str, report: dict[str, Any], token: str | None, deadline: float = DEADLINE,
    trust: Trust | None = None,
) -> str | None:
    """POST ``report`` to ``{base_url}/v1/hosts/{host}/passes``; None on success, else why not.

    A failure is the caller's warning, never a failed pass. The whole answer is bounded as the
    agent's are (``datum.bounded.request``: ``deadline`` seconds, however slowly the server
    trickles it). The token is sent as a Bearer header and never appears in what this returns.
    A redirect is not followed: it is a failed delivery, said so. Over https, the server is trusted as
    ``trust`` says (``--ca-file``, ``--pin``: ``datum.trust``).
    """
    url = f"{base_url.rstrip('/')}/v1/hosts/{urllib.parse.quote(host, safe='')}/passes"
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        answer = request("POST", url, headers, data=json.dumps(report).encode(), deadline=deadline, trust=trust)
    except Unusable as exc:
        return str(exc)
    if 200 <= answer.status < 300:
        return None
    if 300 <= answer.status < 400:
        where = answer.headers.get("Location", "nowhere")
        return (
            f"{url} answered {answer.status} {answer.reason}, a redirect to {where}: "
            "not followed (the report and its token go only to the URL given)"
        )
    return f"{url} answered {answer.status} {answer.reason}{issues_in(answer.body)}"

"""Delivering spooled pass reports to the server, oldest first, with the standard library only."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from datum.host.remote import _NoRedirects

# Answers that will never change for this report: it is dropped (and said so), not retried forever.
_PERMANENT = {400, 404, 413, 422}


@dataclass(frozen=True)
class Sent:
    ok: bool
    why: str | None = None
    permanent: bool = False


def post(server: str, host: str, report: dict[str, Any], token: str, timeout: float = 10) -> Sent:
    url = f"{server.rstrip('/')}/v1/hosts/{urllib.parse.quote(host, safe='')}/passes"
    request = urllib.request.Request(
        url,
        data=json.dumps(report).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        method="POST",
    )
    try:
        with urllib.request.build_opener(_NoRedirects).open(request, timeout=timeout) as response:
            response.read()
            return Sent(True)
    except urllib.error.HTTPError as exc:
        return Sent(False, f"{url} answered {exc.code} {exc.reason}", exc.code in _PERMANENT)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return Sent(False, f"cannot reach {url}: {getattr(exc, 'reason', exc)}")


@dataclass(frozen=True)
class Flushed:
    delivered: int
    dropped: int
    left: int
    why: str | None  # why delivery stopped, when it did


def flush(state: Any, server: str, host: str, token: str) -> Flushed:
    """Send every spooled report in sequence order; stop at the first the server does not take."""
    delivered = dropped = 0
    dropped += state.trim()
    pending = state.pending()
    for i, (seq, report) in enumerate(pending):
        sent = post(server, host, report, token)
        if sent.ok:
            state.delivered(seq)
            delivered += 1
        elif sent.permanent:
            state.delivered(seq)
            dropped += 1
        else:
            return Flushed(delivered, dropped, len(pending) - i, sent.why)
    return Flushed(delivered, dropped, 0, None)

"""Posting a pass report to a Datum server, with the standard library only (no HTTP client import)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


def post_report(
    base_url: str, host: str, report: dict[str, Any], token: str | None, timeout: float = 10
) -> str | None:
    """POST ``report`` to ``{base_url}/v1/hosts/{host}/passes``; None on success, else why not.

    A failure is the caller's warning, never a failed pass. The token is sent
    as a Bearer header and never appears in what this returns.
    """
    url = f"{base_url.rstrip('/')}/v1/hosts/{urllib.parse.quote(host, safe='')}/passes"
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        url, data=json.dumps(report).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - operator-given URL
            response.read()
            return None
    except urllib.error.HTTPError as exc:
        return f"{url} answered {exc.code} {exc.reason}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"cannot reach {url}: {reason}"

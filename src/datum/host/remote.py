"""Posting a pass report to a Datum server, with the standard library only (no HTTP client import)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Follow no redirect: the bearer token goes to the URL the operator gave, and nowhere else.

    urllib would follow a 301/302/303 as a GET carrying every header,
    ``Authorization`` included, to whatever origin ``Location`` names.
    """

    def redirect_request(self, *_args: Any, **_kwargs: Any) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


def issues_of(exc: urllib.error.HTTPError) -> str:
    """The messages of an error answer in the contract's shape, as ``": msg; msg"``; "" when it has none."""
    try:
        return issues_in(exc.read())
    except OSError:
        return ""


def issues_in(body: bytes) -> str:
    """``issues_of`` for an error answer's body already read."""
    try:
        issues = json.loads(body).get("issues") or []
        return ": " + "; ".join(str(i.get("message")) for i in issues)[:2000]
    except (ValueError, AttributeError, TypeError, RecursionError):
        return ""


def post_report(
    base_url: str, host: str, report: dict[str, Any], token: str | None, timeout: float = 10
) -> str | None:
    """POST ``report`` to ``{base_url}/v1/hosts/{host}/passes``; None on success, else why not.

    A failure is the caller's warning, never a failed pass. The token is sent
    as a Bearer header and never appears in what this returns. A redirect is
    not followed: it is a failed delivery, said so.
    """
    url = f"{base_url.rstrip('/')}/v1/hosts/{urllib.parse.quote(host, safe='')}/passes"
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        url, data=json.dumps(report).encode(), headers=headers, method="POST"
    )
    opener = urllib.request.build_opener(_NoRedirects)
    try:
        with opener.open(request, timeout=timeout) as response:
            response.read()
            return None
    except urllib.error.HTTPError as exc:
        if 300 <= exc.code < 400:
            where = exc.headers.get("Location", "nowhere")
            return (
                f"{url} answered {exc.code} {exc.reason}, a redirect to {where}: "
                "not followed (the report and its token go only to the URL given)"
            )
        return f"{url} answered {exc.code} {exc.reason}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"cannot reach {url}: {reason}"

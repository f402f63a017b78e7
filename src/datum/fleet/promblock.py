"""The fleet's reboot block: while ``[fleet] reboot_block_query`` returns any series on ``[fleet]
prometheus_url``, no reboot lease is granted in any group (kured's ``--prometheus-url`` and alert filter).

Why on the server, at grant time: one answer for the whole fleet, asked by the one deciding (a thousand agents
do not each query Prometheus), and a host never reboots on a stale yes. The answer is cached for ``CACHE``
seconds per process, so a burst of asks is one query. Fail safe: a Prometheus that cannot be asked, answers
an error, or answers something that is not a query result blocks, saying why. The request is bounded in time
(``prometheus_timeout``, the whole answer) and size (``LIMIT``), redirects not followed
(``datum.bounded``). Each refusal it causes is counted (``refused``: ``/metrics``). What people read
(``shown``) is the last answer, refreshed in the background: a slow Prometheus never holds up the page.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

CACHE = 5.0  # seconds an answer is reused
LIMIT = 1024 * 1024  # bytes of an answer read at most
SHOWN = 3  # series named in the words


@dataclass(frozen=True)
class Block:
    """One answer: ``why`` the reboots are blocked (None: not blocked), and how many series the query returned."""

    why: str | None
    series: int = 0
    at: float = 0.0


_lock = threading.Lock()
_cache: dict[tuple[str, str], Block] = {}
_refused = 0


def refused() -> int:
    """Grants this process refused because of the block query, since it started."""
    return _refused


def count_refusal() -> None:
    global _refused
    with _lock:
        _refused += 1


def check(url: str | None, query: str | None, timeout: float) -> Block:
    """The block now (cached ``CACHE`` seconds); not blocked when no query is configured."""
    if not query or not url:
        return Block(None)
    key = (url, query)
    now = time.monotonic()
    with _lock:
        kept = _cache.get(key)
    if kept is not None and now - kept.at < CACHE:
        return kept
    return _asked(key, timeout)


def _asked(key: tuple[str, str], timeout: float) -> Block:
    """Ask now; keep the answer unless one asked later is kept already (a slow background ask that ends after a
    grant's must not put back the older answer: a stale yes). Stamped when the ask began."""
    began = time.monotonic()
    found = ask(key[0], key[1], timeout)
    found = Block(found.why, found.series, began)
    with _lock:
        kept = _cache.get(key)
        if kept is None or kept.at <= began:
            _cache[key] = found
    return found


_refreshing: set[tuple[str, str]] = set()


def shown(url: str | None, query: str | None, timeout: float) -> Block:
    """The block for a reader (the page, ``/metrics``, ``GET /v1/reboots``), never held up by Prometheus: the
    last answer, asked again in a background thread (one at a time) when older than ``CACHE``. Only the first
    read of a process, with no answer yet, asks and waits. A grant reads ``check``: an answer at most
    ``CACHE`` old, asked then when older, never one a background ask put back over a newer."""
    if not query or not url:
        return Block(None)
    key = (url, query)
    with _lock:
        kept = _cache.get(key)
        stale = kept is not None and time.monotonic() - kept.at >= CACHE and key not in _refreshing
        if stale:
            _refreshing.add(key)
    if kept is None:
        return check(url, query, timeout)
    if stale:
        def refresh() -> None:
            try:
                _asked(key, timeout)
            finally:
                with _lock:
                    _refreshing.discard(key)

        threading.Thread(target=refresh, name="datum-promblock", daemon=True).start()
    return kept


def ask(url: str, query: str, timeout: float) -> Block:
    """One query, uncached: ``GET {url}/api/v1/query?query=...`` read as Prometheus's instant query answer."""
    from datum.bounded import Unusable, request

    where = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    said = f"the Prometheus query {query}"
    try:
        got = request("GET", where, {"Accept": "application/json"}, deadline=timeout, limit=LIMIT)
    except Unusable as exc:
        return Block(f"{said} could not be asked, so reboots wait (fail safe): {exc}")
    if not 200 <= got.status < 300:
        return Block(f"{said} could not be asked, so reboots wait (fail safe): Prometheus answered {got.status} {got.reason}")
    try:
        answer: Any = json.loads(got.body)
    except (ValueError, RecursionError):
        answer = None
    data = answer.get("data") if isinstance(answer, dict) and answer.get("status") == "success" else None
    result = data.get("result") if isinstance(data, dict) else None
    if data is None or not isinstance(result, list):
        return Block(f"{said} could not be asked, so reboots wait (fail safe): the answer is not a query result")
    if data.get("resultType") in ("scalar", "string"):  # a single value, not series: nothing returned
        return Block(None)
    if not result:
        return Block(None)
    named = [_series(r) for r in result[:SHOWN]]
    more = f" and {len(result) - SHOWN} more" if len(result) > SHOWN else ""
    return Block(f"{said} returns {len(result)} series: {', '.join(named)}{more}", len(result))


def _series(r: Any) -> str:
    """One series as PromQL writes it: ``ALERTS{alertname="X",severity="page"}``."""
    labels = r.get("metric") if isinstance(r, dict) else None
    if not isinstance(labels, dict):
        return "{}"
    name = str(labels.get("__name__", ""))
    rest = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{rest}}}"[:200]


def forget() -> None:
    """Drop the cached answers (a test changing what the fake Prometheus says)."""
    with _lock:
        _cache.clear()

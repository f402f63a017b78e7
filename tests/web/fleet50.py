"""A 50-host fleet with one failing host, on a real store: what an operator's phone shows most days.

Forty-nine hosts converged, each having updated a package in the last hour (the fleet's timeline is full:
more events than the page lists), and ``web-13`` failing; the buckets story's reconciler (degraded: reaps
held by a breaker, an item in backoff, one waiting on its owner) beside ``pg_roles``, off by default.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from api.story import Story, build_story, play

HOSTS = [f"web-{n:02d}" for n in range(1, 51)]
FAILING = "web-13"


def _converged(host: str, finished: datetime) -> dict[str, Any]:
    """A pass that updated ``Package[openssl]`` and left everything converged."""
    resources = [
        {"id": "Package[openssl]", "type": "Package", "name": "openssl", "action": "update", "state": "converged",
         "changed": True},
        {"id": "Package[nginx]", "type": "Package", "name": "nginx", "action": "none", "state": "converged"},
        {"id": "Service[nginx]", "type": "Service", "name": "nginx", "action": "restart", "state": "converged",
         "changed": True},
    ]
    return {
        "host": host, "mode": "enforce", "state": "converged",
        "startedAt": (finished - timedelta(seconds=3)).isoformat(), "finishedAt": finished.isoformat(),
        "durationSeconds": 3.0, "bootId": "boot-1", "exitCode": 2, "intervalSeconds": 1800,
        "counts": {"converged": 3}, "resources": resources,
    }


def _failed(host: str, finished: datetime) -> dict[str, Any]:
    """A pass whose site configuration could not be written (a path as long as real ones are), so nginx was not
    restarted."""
    site = "File[/etc/nginx/sites-available/checkout.shop.example.com.conf]"
    error = "open /etc/nginx/sites-available/checkout.shop.example.com.conf.datum-new: permission denied"
    resources = [
        {"id": "Package[nginx]", "type": "Package", "name": "nginx", "action": "none", "state": "converged"},
        {"id": site, "type": "File", "name": "/etc/nginx/sites-available/checkout.shop.example.com.conf", "action": "update",
         "state": "failed", "error": error},
        {"id": "Service[nginx]", "type": "Service", "name": "nginx", "action": "restart", "state": "blocked",
         "reason": f"blocked by {site}", "blockedBy": [site]},
    ]
    return {
        "host": host, "mode": "enforce", "state": "failed", "reason": f"{site} failed: {error}",
        "startedAt": (finished - timedelta(seconds=2)).isoformat(), "finishedAt": finished.isoformat(),
        "durationSeconds": 2.0, "bootId": "boot-1", "exitCode": 4, "intervalSeconds": 1800,
        "counts": {"converged": 1, "failed": 1, "blocked": 1}, "resources": resources,
    }


def fleet(tmp_path: Path, store: str | None = None) -> Story:
    """The fleet above, its passes posted through ``POST /v1/hosts/{host}/passes`` as agents post them."""
    story = build_story(tmp_path, store, refresh="1s")  # the page refreshes every second
    play(story)
    now = datetime.now(UTC).replace(microsecond=0)
    for n, host in enumerate(HOSTS):
        finished = now - timedelta(minutes=50 - n)
        if host == FAILING:
            report = _failed(host, finished)
        else:
            report = _converged(host, finished)
        answer = story.client.post(f"/v1/hosts/{host}/passes", json=report, headers=story.agent(host))
        assert answer.status_code == 201, answer.text
    return story

"""The drift report cache and the fast path: the same bytes as the route, errors still through the route."""

from __future__ import annotations

import time

from .story import play

DRIFT = "/v1/observability/admin/reconcilers/buckets/drift"


def test_a_cached_report_is_served_until_it_is_stale_or_forgotten(story):
    cache = story.app.state.datum.reports
    cache.ttl = 60
    play(story)
    first = story.get(DRIFT)
    story.tick(1)  # out of this process's sight, as if the CLI had ticked
    assert story.get(DRIFT).content == first.content  # cached (the fast path answers)
    cache.invalidate("buckets")  # what a tick of this process's scheduler does
    after = story.get(DRIFT).json()
    assert after["asOf"] != first.json()["asOf"]


def test_a_stale_report_is_served_at_once_while_it_is_refreshed(story):
    cache = story.app.state.datum.reports
    cache.ttl = 0.5
    play(story)
    first = story.get(DRIFT).json()
    story.tick(1)
    time.sleep(0.6)  # stale, but not 4 x ttl old
    assert story.get(DRIFT).json() == first  # stale: answered at once, refresh started
    deadline = time.monotonic() + 5
    while story.get(DRIFT).json()["asOf"] == first["asOf"]:
        assert time.monotonic() < deadline, "the stale report was never refreshed"
        time.sleep(0.05)


def test_a_report_nobody_asked_for_in_a_while_is_recomputed_not_served(story):
    cache = story.app.state.datum.reports
    cache.ttl = 0.1
    play(story)
    first = story.get(DRIFT).json()
    story.tick(1)
    time.sleep(0.45)  # past 4 x ttl
    assert story.get(DRIFT).json()["asOf"] != first["asOf"]


def test_with_a_cached_report_errors_still_come_from_the_routes(story):
    story.app.state.datum.reports.ttl = 60
    play(story)
    assert story.get(DRIFT).status_code == 200  # cached now
    r = story.client.get(DRIFT, headers={"Authorization": "Bearer datum_wrong"})
    assert r.status_code == 401 and r.json()["issues"][0]["code"] == "UNAUTHENTICATED"
    r = story.get(DRIFT, principal="stranger")
    assert r.status_code == 403 and r.json()["issues"][0]["action"] == "observability:ReadSubstrate"
    assert story.client.get(DRIFT).status_code == 401
    assert story.get(DRIFT + "?x=1").status_code == 200  # through the route: the same answer
    assert story.get(DRIFT + "?x=1").content == story.get(DRIFT).content


def test_the_fast_path_never_asks_the_store_and_a_store_fault_is_answered_in_shape(story):
    """An unknown token on a cached drift report must not block the event loop on the store.

    The store lookup of a token the server has not seen fails (as a locked
    store does after lock_wait): the fast path does not call it; the route does,
    off the event loop, and answers 503 in the contract's shape.
    """
    from datum.core.findings import Problem

    play(story)
    assert story.get(DRIFT).status_code == 200  # cached, and the operator's token too
    book = story.app.state.datum.tokens
    asked: list[str] = []

    def locked(digest: str) -> str | None:
        import asyncio

        try:
            asyncio.get_running_loop()
            asked.append("on the event loop")
        except RuntimeError:
            asked.append("in a worker thread")
        raise Problem.one("UNAVAILABLE", "the store is locked")

    book._lookup = locked
    assert story.get(DRIFT).status_code == 200  # a cached token: the store is not asked
    assert asked == []
    r = story.client.get(DRIFT, headers={"Authorization": "Bearer datum_never_seen_before"})
    assert r.status_code == 503, r.text
    assert r.json()["issues"][0]["code"] == "UNAVAILABLE"
    assert asked == ["in a worker thread"]

"""The Prometheus reboot block (``datum.fleet.promblock``) against a fake Prometheus on loopback answering the
real ``/api/v1/query`` shape: series block, none do not, and whatever cannot be read blocks (fail safe)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from datum.fleet import promblock

from .fakeprometheus import FIRING, FakePrometheus

QUERY = 'ALERTS{alertstate="firing",severity="page"}'


@pytest.fixture
def prometheus() -> Iterator[FakePrometheus]:
    promblock.forget()
    with FakePrometheus() as fake:
        yield fake
    promblock.forget()


def test_series_block_and_none_do_not(prometheus: FakePrometheus):
    assert promblock.ask(prometheus.url, QUERY, 5).why is None
    assert prometheus.asked == [QUERY]  # the query as configured, URL-encoded on the way
    prometheus.series = [FIRING, {**FIRING, "alertname": "DiskFull"}, {"__name__": "up"}, {"job": "x"}]
    found = promblock.ask(prometheus.url, QUERY, 5)
    assert found.series == 4
    assert found.why == (
        f"the Prometheus query {QUERY} returns 4 series: "
        'ALERTS{alertname="HostDown",alertstate="firing",severity="page"}, '
        'ALERTS{alertname="DiskFull",alertstate="firing",severity="page"}, up{} and 1 more'
    )


def test_what_cannot_be_read_blocks(prometheus: FakePrometheus):
    prometheus.status = 500
    assert "could not be asked, so reboots wait (fail safe): Prometheus answered 500" in promblock.ask(prometheus.url, QUERY, 5).why
    prometheus.status, prometheus.body = 200, b'{"status": "success", "data": {"resultType": "vector"'
    assert "the answer is not a query result" in promblock.ask(prometheus.url, QUERY, 5).why
    prometheus.body = b'{"status": "error", "error": "parse error"}'
    assert "the answer is not a query result" in promblock.ask(prometheus.url, QUERY, 5).why
    prometheus.body = b"[" * (promblock.LIMIT + 10)  # past the size bound: not read whole
    assert "could not be asked" in promblock.ask(prometheus.url, QUERY, 5).why
    prometheus.body, prometheus.delay = None, 3.0  # slower than the timeout
    assert "could not be asked" in promblock.ask(prometheus.url, QUERY, 0.5).why


def test_an_unreachable_prometheus_blocks():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: refused
    found = promblock.ask(closed, QUERY, 2)
    assert found.why is not None and found.why.startswith(f"the Prometheus query {QUERY} could not be asked")


def test_one_query_per_cache_window(prometheus: FakePrometheus):
    prometheus.series = [FIRING]
    first = promblock.check(prometheus.url, QUERY, 5)
    again = promblock.check(prometheus.url, QUERY, 5)
    assert first.why and again == first and len(prometheus.asked) == 1
    assert promblock.check(None, QUERY, 5).why is None and promblock.check(prometheus.url, None, 5).why is None
    prometheus.series = []
    promblock.forget()  # as CACHE seconds passing would
    assert promblock.check(prometheus.url, QUERY, 5).why is None and len(prometheus.asked) == 2


def test_a_reader_is_never_held_up_by_prometheus_and_asks_once_in_the_background(
    prometheus: FakePrometheus, monkeypatch
):
    """The page, /metrics and GET /v1/reboots read ``shown``: the last answer at once, refreshed in one
    background query when stale; a grant reads ``check``, which asks (never a stale yes)."""
    import time

    monkeypatch.setattr(promblock, "CACHE", 0.05)
    prometheus.series = [FIRING]
    assert promblock.shown(prometheus.url, QUERY, 5).why  # the first read of a process asks, and waits
    time.sleep(0.1)  # stale now
    prometheus.series, prometheus.delay = [], 2.0  # Prometheus got slow, and the alert resolved
    began = time.monotonic()
    seen = [promblock.shown(prometheus.url, QUERY, 5).why for _ in range(5)]
    assert time.monotonic() - began < prometheus.delay  # not one of them waited for it
    assert all(seen)  # the last answer meanwhile
    monkeypatch.setattr(promblock, "CACHE", 60.0)  # no further refresh: the one in flight is the one counted
    deadline = time.monotonic() + 10
    while promblock.shown(prometheus.url, QUERY, 5).why and time.monotonic() < deadline:
        time.sleep(0.05)
    assert promblock.shown(prometheus.url, QUERY, 5).why is None  # refreshed in the background
    assert len(prometheus.asked) == 2  # one query for the first read, one for every stale read since


def test_an_older_answer_never_replaces_a_newer_one(monkeypatch):
    """A background ask that began before a grant's and ends after it must not put back its older "not blocked":
    the next grant would read a stale yes."""
    import threading

    promblock.forget()
    release, calls = threading.Event(), []

    def ask(url: str, query: str, timeout: float) -> promblock.Block:
        calls.append(url)
        if len(calls) == 1:  # the slow one, begun first: what Prometheus said before the alert fired
            release.wait(10)
            return promblock.Block(None)
        return promblock.Block("the Prometheus query ... returns 1 series: ALERTS{...}", 1)

    monkeypatch.setattr(promblock, "ask", ask)
    key = ("http://prometheus.invalid", QUERY)
    slow = threading.Thread(target=promblock._asked, args=(key, 5.0))
    slow.start()
    while not calls:
        pass
    assert promblock.check(*key, 5.0).why  # the grant's own ask, begun later: blocked
    release.set()
    slow.join(10)
    assert promblock.check(*key, 5.0).why  # still the newer answer
    assert len(calls) == 2
    promblock.forget()

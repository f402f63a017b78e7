"""The watch that makes every replica forget a drift report once any process recorded a tick."""

from __future__ import annotations

import queue
from datetime import UTC, datetime

from datum.api.watch import RunWatch
from datum.store import open_store
from datum.store.runs import record_executed, record_skipped


def _tick(store, name, executed=False):
    now = datetime.now(UTC)
    with store.begin() as conn:
        if executed:
            record_executed(conn, name, {"as_of": now, "last_ran_at": now, "completed": True, "health": "ok",
                                         "drift": 0, "blocked": 0, "dropped": 0, "reasons": {}, "items": []})
        else:
            record_skipped(conn, name, now)


def test_a_tick_recorded_by_another_process_is_reported_within_a_period(store_url):
    writer, reader = open_store(store_url), open_store(store_url)  # two replicas' pools
    seen: queue.Queue[str | None] = queue.Queue()
    watch = RunWatch(reader, seen.put, period=0.05)
    try:
        _tick(writer, "quiet")
        watch.start()
        assert seen.get(timeout=10) is None  # the first read: nothing known yet, forget all
        _tick(writer, "buckets")  # a new reconciler row
        assert seen.get(timeout=10) == "buckets"
        _tick(writer, "buckets", executed=True)
        assert seen.get(timeout=10) == "buckets"
        _tick(writer, "quiet")
        assert seen.get(timeout=10) == "quiet"
        watch.poll()  # nothing moved since
        assert seen.empty()
    finally:
        watch.stop()
        writer.dispose()
        reader.dispose()


def test_after_the_store_failed_to_answer_every_report_is_forgotten(store_url):
    store = open_store(store_url)
    seen: list[str | None] = []
    watch = RunWatch(store, seen.append)
    try:
        watch.poll()
        assert seen == [None]
        with store.begin() as conn:  # the store cannot answer the watch's read
            conn.exec_driver_sql("ALTER TABLE reconciler_runs RENAME TO reconciler_runs_away")
        watch.poll()
        assert seen == [None]
        with store.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE reconciler_runs_away RENAME TO reconciler_runs")
        watch.poll()
        assert seen == [None, None]  # a tick may have been missed meanwhile
    finally:
        store.dispose()


def test_a_wake_within_a_time_polls_by_then_not_at_the_end_of_the_period():
    """``Every.wake(within)``: the pass of a rollout's last host came within ``INTAKE_GAP`` of the last check, so
    none ran on it, and the check loop slept its whole period (2 s) before releasing the next wave."""
    import threading
    import time

    from datum.api.watch import Every

    polled: list[float] = []
    seen = threading.Event()

    def poll() -> None:
        polled.append(time.monotonic())
        if len(polled) > 1:
            seen.set()

    every = Every(poll, 60.0, "test-every")
    every.start()
    try:
        while not polled:
            time.sleep(0.01)
        asked = time.monotonic()
        every.wake(0.2)
        every.wake(30)  # a later ask never puts the earlier one off
        assert seen.wait(5), "polled again by the time asked, not at the end of the period"
        assert 0.15 <= polled[1] - asked < 2
    finally:
        every.stop()

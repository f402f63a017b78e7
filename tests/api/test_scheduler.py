"""The scheduler ticks each enabled reconciler at its interval, and stops."""

from __future__ import annotations

import threading
import time

from datum.plugins import load as _load_plugins
from datum.reconcile.runner import Runner
from datum.reconcile.scheduler import Scheduler
from datum.store import open_store

from .story import settings_for


def test_ticks_at_the_interval_and_reports_each_tick(tmp_path):
    settings = settings_for(tmp_path)
    settings.reconcilers["buckets"]["interval"] = "50ms"
    store = open_store(settings.store_url)
    seen = []
    enough = threading.Event()

    def on_tick(tick):
        seen.append(tick)
        if len(seen) >= 3:
            enough.set()

    scheduler = Scheduler(Runner(_load_plugins().registry(), settings, store), on_tick=on_tick)
    assert scheduler.names() == ["buckets"]
    started = time.monotonic()
    scheduler.start()
    assert enough.wait(10)
    scheduler.stop()
    assert time.monotonic() - started >= 0.09  # three ticks are two intervals apart at least
    assert {t.reconciler for t in seen} == {"buckets"}
    assert seen[0].outcome.value == "executed"
    count = len(seen)
    time.sleep(0.2)
    assert len(seen) == count  # stopped means stopped
    store.dispose()


def test_a_disabled_reconciler_is_not_ticked(tmp_path):
    settings = settings_for(tmp_path)
    settings.reconcilers["buckets"]["enabled"] = False
    store = open_store(settings.store_url)
    scheduler = Scheduler(Runner(_load_plugins().registry(), settings, store))
    assert scheduler.names() == []
    scheduler.start()
    scheduler.stop()
    store.dispose()

"""Two runners on one store: one pass at a time, never closer than the interval on a schedule,
no write from a pass that lost its claim, and no claim outliving the process that held it.

Every runner here has a Store of its own (a process of its own where a process
is killed), on one SQLite file and on the PostgreSQL server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from slow_reconciler import NAME, Slow, progress, registry, setup, writes

from datum.config import load_settings
from datum.reconcile.runner import Runner, TickOutcome
from datum.reconcile.scheduler import Scheduler
from datum.store import open_store
from datum.store.locks import session_lock
from datum.store.memory import load_memory
from datum.store.runs import load_run
from datum.store.schema import locks

SCRIPT = str(Path(__file__).with_name("slow_reconciler.py"))


@pytest.fixture(autouse=True)
def _no_hook():
    Slow.on_apply, Slow.write_status = None, True
    yield
    Slow.on_apply, Slow.write_status = None, True


def runners(tmp_path, store_url, items, count=2, **section):
    """``count`` runners on one store, each with its own Store; and the substrate folder."""
    root = tmp_path / "slow"
    config = setup(root, store_url, items, **section)
    settings = load_settings(str(config))
    stores = [open_store(store_url) for _ in range(count)]
    return root, [Runner(registry(), settings, s) for s in stores], stores


def run_row(store):
    with store.connect() as conn:
        return load_run(conn, NAME)


def test_a_scheduled_tick_within_the_interval_of_another_runners_pass_is_not_due(tmp_path, store_url):
    root, (a, b), stores = runners(tmp_path, store_url, ["x"], interval="1h")
    assert a.tick(NAME, scheduled=True).outcome is TickOutcome.EXECUTED
    (root / "items" / "x").unlink()  # drift the other runner would act on at once
    tick = b.tick(NAME, scheduled=True)
    assert tick.outcome is TickOutcome.NOT_DUE
    assert 3590 < tick.due_in <= 3600
    row = run_row(stores[1])
    assert (row["executed_passes"], row["skipped_passes"]) == (1, 0)
    assert not (root / "items" / "x").exists()
    assert len((root / "passes").read_text().splitlines()) == 1
    # an operator's explicit pass is not held to the interval, and still claims
    assert b.tick(NAME).outcome is TickOutcome.EXECUTED
    assert (root / "items" / "x").exists()
    assert run_row(stores[0])["claim"] == 2
    for s in stores:
        s.dispose()


def test_two_schedulers_on_one_store_a_moment_apart_run_one_pass(tmp_path, store_url):
    """The issue's reproduction: two ``datum serve`` on one store, started a moment apart."""
    root, (a, b), stores = runners(tmp_path, store_url, ["x"], interval="30s")
    seen = []
    tick = b.tick

    def recorded(*args, **kw):
        seen.append(tick(*args, **kw))
        return seen[-1]

    b.tick = recorded
    first, second = Scheduler(a), Scheduler(b)
    first.start()
    wait_for(lambda: (run_row(stores[0]) or {}).get("executed_passes") == 1)
    # The first pass is persisted; wait until it has also let go of its session lock (an
    # instant later), so the second's tick meets the interval, not a pass still running.
    wait_for(lambda: _session_free(stores[1]))
    (root / "items" / "x").unlink()  # drift the second would act on at once
    second.start()
    wait_for(lambda: [t for t in seen if t.reconciler == NAME])
    first.stop()
    second.stop()
    assert len((root / "passes").read_text().splitlines()) == 1
    assert run_row(stores[0])["executed_passes"] == 1
    assert not (root / "items" / "x").exists()
    # Only this reconciler's ticks: the shipped plugins (buckets) tick beside it, and the
    # second's buckets tick may meet the first's buckets pass still running ("skipped").
    assert [t.outcome.value for t in seen if t.reconciler == NAME][0] == "not-due", seen
    for s in stores:
        s.dispose()


def _session_free(store) -> bool:
    """Whether no pass holds the reconciler's session lock (taken and given back at once)."""
    probe = session_lock(store, f"reconciler:{NAME}")
    if not probe.try_acquire():
        return False
    probe.release()
    return True


def test_an_explicit_pass_during_another_runners_pass_is_skipped(tmp_path, store_url):
    """``datum reconcile`` beside a ``datum serve`` pass: never two passes at once."""
    root, (a, b), stores = runners(tmp_path, store_url, ["p", "q"])
    meanwhile = []

    def explicit(ctx, key):
        Slow.on_apply = None
        meanwhile.append(b.tick(NAME))

    Slow.on_apply = explicit
    assert a.tick(NAME, scheduled=True).outcome is TickOutcome.EXECUTED
    assert [t.outcome for t in meanwhile] == [TickOutcome.SKIPPED]
    assert writes(stores[1]) == {"p": 1, "q": 1}
    row = run_row(stores[1])
    assert (row["executed_passes"], row["skipped_passes"], row["claim"]) == (1, 1, 1)
    for s in stores:
        s.dispose()


def test_datum_reconcile_whose_pass_is_skipped_says_so_and_exits_69(tmp_path, store_url):
    """The operator asked for a pass and none ran: not exit 0 (converged), not 4 (a failed pass)."""
    root, (a,), stores = runners(tmp_path, store_url, ["p"], count=1)
    config = root / "datum.toml"
    seen = []

    def explicit(ctx, key):
        Slow.on_apply = None
        done = subprocess.run(
            [sys.executable, SCRIPT, "reconcile", NAME, "--config", str(config)],
            capture_output=True, text=True, timeout=120, check=False,
        )
        seen.append(done)

    Slow.on_apply = explicit
    assert a.tick(NAME, scheduled=True).outcome is TickOutcome.EXECUTED
    (done,) = seen
    assert done.returncode == 69, done.stdout + done.stderr
    assert "pass 1: skipped" in done.stdout
    assert f"datum: {NAME}: pass 1 skipped: another pass of {NAME} is running" in done.stderr
    after = subprocess.run(
        [sys.executable, SCRIPT, "reconcile", NAME, "--config", str(config)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert after.returncode == 0, after.stdout + after.stderr  # nothing running: the pass runs
    for s in stores:
        s.dispose()


def _steal(store_url, root):
    """What happens when a pass's session lock is lost (its PostgreSQL session ended, the
    lock file removed): another runner claims the reconciler and runs a whole pass."""
    if store_url.startswith("postgresql"):
        admin = sa.create_engine(store_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            ended = conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks"
                    " WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()"
                    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                )
            ).all()
        admin.dispose()
        assert ended
    else:
        database = sa.engine.make_url(store_url).database
        os.unlink(f"{os.path.realpath(database)}.reconciler_{NAME}.lock")


def test_a_pass_whose_claim_was_overtaken_writes_nothing(tmp_path, store_url):
    root, (a, b), stores = runners(tmp_path, store_url, ["p", "q", "r"])
    other = []

    def overtake(ctx, key):
        Slow.on_apply = None
        _steal(store_url, root)
        other.append(b.tick(NAME))

    Slow.on_apply = overtake
    tick = a.tick(NAME)
    assert [t.outcome for t in other] == [TickOutcome.EXECUTED]
    assert tick.outcome is TickOutcome.LOST_CLAIM
    assert "lost its claim" in tick.error
    # The overtaking pass applied and recorded everything; the overtaken one wrote no
    # status (each item written once), no item memory and no run row.
    assert writes(stores[1]) == {"p": 1, "q": 1, "r": 1}
    row = run_row(stores[1])
    assert (row["executed_passes"], row["claim"], row["completed"]) == (1, 2, True)
    with stores[1].connect() as conn:
        memory = load_memory(conn, NAME, "item")  # the overtaking pass's: acted on, no failure
    assert sorted(memory) == ["p", "q", "r"]
    assert {(m.failures, m.last_err) for m in memory.values()} == {(0, None)}
    # and it applied nothing after it found out
    assert progress(root).count("applying q") == 1 and progress(root).count("applying r") == 1
    for s in stores:
        s.dispose()


def test_a_pass_that_loses_its_session_lock_applies_no_further_item(tmp_path, store_url):
    """Nobody claimed yet, so what it did is persisted; but it stops where another could start."""
    root, (a, b), stores = runners(tmp_path, store_url, ["p", "q", "r"])

    def lose(ctx, key):
        Slow.on_apply = None
        _steal(store_url, root)

    Slow.on_apply = lose
    tick = a.tick(NAME)
    assert tick.outcome is TickOutcome.EXECUTED and tick.stopped
    assert "session lock was lost" in tick.error
    assert progress(root) == ["applying p", "applied p"]
    assert writes(stores[1]) == {"p": 1}
    assert b.tick(NAME).outcome is TickOutcome.EXECUTED
    assert writes(stores[1]) == {"p": 1, "q": 1, "r": 1}
    for s in stores:
        s.dispose()


def test_a_lost_claim_refuses_the_runners_own_writes_too(tmp_path, store_url):
    """No status write to trip over: the runner's item memory and run row are fenced as well."""
    root, (a,), stores = runners(tmp_path, store_url, ["x"], count=1)
    Slow.write_status = False

    def overtake(ctx, key):
        Slow.on_apply = None
        with stores[0].begin() as conn:  # another runner's claim, as take_claim writes it
            conn.execute(sa.text("UPDATE reconciler_runs SET claim = claim + 1"))

    Slow.on_apply = overtake
    tick = a.tick(NAME)
    assert tick.outcome is TickOutcome.LOST_CLAIM and "lost its claim" in tick.error
    assert (root / "items" / "x").exists()
    row = run_row(stores[0])
    assert (row["executed_passes"], row["last_ran_at"], row["claim"]) == (0, None, 2)
    for s in stores:
        s.dispose()


def datum(config, *args, delay=None, **kw):
    env = dict(os.environ)
    if delay is not None:
        env["SLOW_DELAY"] = str(delay)
    return subprocess.Popen(
        [sys.executable, SCRIPT, *args, "--config", str(config)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_killed_datum_reconcile_never_makes_the_next_one_skip(tmp_path, store_url):
    root = tmp_path / "slow"
    config = setup(root, store_url, ["a", "b"])  # lock_ttl: the default ten minutes
    first = datum(config, "reconcile", NAME, delay=60)
    try:
        wait_for(lambda: "applying a" in progress(root))
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate()
    started = time.monotonic()
    second = datum(config, "reconcile", NAME, delay=0)
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert out.startswith("pass 1: health ok"), out
    assert time.monotonic() - started < 20
    assert sorted(p.name for p in (root / "items").iterdir()) == ["a", "b"]


def test_sigterm_finishes_the_current_item_persists_releases_and_exits_non_zero(tmp_path, store_url):
    root = tmp_path / "slow"
    config = setup(root, store_url, ["a", "b", "c"])
    proc = datum(config, "reconcile", NAME, "--passes", "3", delay=1.0)
    wait_for(lambda: "applying a" in progress(root))
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, (out, err)
    assert "stopped" in err
    assert progress(root) == ["applying a", "applied a"]  # finished a, began nothing else
    assert [p.name for p in (root / "items").iterdir()] == ["a"]
    store = open_store(load_settings(str(config)).store_url)
    assert writes(store) == {"a": 1}  # a's status write went through
    row = run_row(store)
    assert row["executed_passes"] == 1 and not row["completed"] and "stopped" in row["error"]
    with store.connect() as conn:
        assert conn.execute(sa.select(locks.c.holder).where(locks.c.name == f"reconciler:{NAME}")).scalar() is None
    # released: the next pass runs at once and does the rest
    again = datum(config, "reconcile", NAME, delay=0)
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0 and out.startswith("pass 1: health ok"), (out, err)
    assert sorted(p.name for p in (root / "items").iterdir()) == ["a", "b", "c"]
    assert writes(store) == {"a": 1, "b": 1, "c": 1}
    store.dispose()


def test_items_a_stopped_pass_did_not_reach_keep_their_memory(tmp_path, store_url):
    root, (a,), stores = runners(tmp_path, store_url, ["a", "b", "c"], count=1, confirmation_ticks=2)
    assert a.tick(NAME).outcome is TickOutcome.EXECUTED  # all three seen once: awaiting confirmation
    with stores[0].connect() as conn:
        seen = load_memory(conn, NAME, "item")
    stop = threading.Event()
    Slow.on_apply = lambda ctx, key: stop.set()
    tick = a.tick(NAME, should_stop=stop.is_set)
    assert tick.stopped and progress(root) == ["applying a", "applied a"]
    assert tick.reasons == {"acting": 1}  # b and c were not attempted: not failures
    with stores[0].connect() as conn:
        memory = load_memory(conn, NAME, "item")
    assert memory["b"] == seen["b"] and memory["c"] == seen["c"]  # not failed, not advanced
    assert memory["a"].streak == 2 and memory["a"].failures == 0
    Slow.on_apply = None
    assert a.tick(NAME).outcome is TickOutcome.EXECUTED  # confirmed now: applied, no backoff
    assert writes(stores[0]) == {"a": 1, "b": 1, "c": 1}
    for s in stores:
        s.dispose()


def test_stopping_the_scheduler_finishes_the_current_item_and_releases(tmp_path, store_url):
    """What ``datum serve`` does on SIGTERM: its lifespan stops the scheduler."""
    root, (a, b), stores = runners(tmp_path, store_url, ["a", "b", "c"], delay=0.3)
    scheduler = Scheduler(a)
    began = threading.Event()
    Slow.on_apply = lambda ctx, key: began.set()
    scheduler.start()
    assert began.wait(10)
    scheduler.stop()
    assert progress(root) == ["applying a", "applied a"]
    row = run_row(stores[1])
    assert row["executed_passes"] == 1 and "stopped" in row["error"]
    assert b.tick(NAME).outcome is TickOutcome.EXECUTED  # released: another runner claims at once
    assert writes(stores[1]) == {"a": 1, "b": 1, "c": 1}
    for s in stores:
        s.dispose()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_stopped_or_killed_datum_serve_leaves_the_reconciler_free(tmp_path, store_url, sig):
    """A ``datum serve`` replica mid-pass: SIGTERM finishes the current item and persists,
    SIGKILL persists nothing; either way the next pass, from any process, runs at once."""
    root = tmp_path / "slow"
    config = setup(root, store_url, ["a", "b", "c"], interval="1h")
    server = datum(config, "serve", "--host", "127.0.0.1", "--port", "0", delay=1.0)
    try:
        wait_for(lambda: "applying a" in progress(root))
    finally:
        server.send_signal(sig)
        out, err = server.communicate(timeout=30)
    store = open_store(load_settings(str(config)).store_url)
    row = run_row(store)
    if sig == signal.SIGTERM:
        assert progress(root) == ["applying a", "applied a"], (out, err)
        assert row["executed_passes"] == 1 and "stopped" in row["error"]
    else:
        assert progress(root) == ["applying a"]
        assert row["executed_passes"] == 0
    again = datum(config, "reconcile", NAME, delay=0)
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0 and out.startswith("pass 1: health ok"), (out, err)
    assert sorted(p.name for p in (root / "items").iterdir()) == ["a", "b", "c"]
    store.dispose()


def test_a_pass_hung_past_its_claims_timeout_is_taken_over_and_writes_nothing(tmp_path, store_url):
    """A process alive but hung keeps its session lock: after ``lock_ttl`` another takes over,
    ends that lock, and fences the hung pass out; when it wakes it applies and writes nothing more."""
    root, (a, b), stores = runners(tmp_path, store_url, ["p", "q", "r"], lock_ttl="1s")
    other = []

    def hang(ctx, key):
        Slow.on_apply = None
        # The hang: past the claim's 1 s timeout by a second, room for a loaded machine (0.2 s
        # past it failed once in a full run beside the real-host boots), with no renewal.
        time.sleep(2.2)
        other.append(b.tick(NAME))

    Slow.on_apply = hang
    tick = a.tick(NAME)
    assert [t.outcome for t in other] == [TickOutcome.EXECUTED]
    assert tick.outcome is TickOutcome.LOST_CLAIM
    # The hung pass finished the apply it was stuck in; its status write was refused, nothing followed.
    assert progress(root).count("applying p") == 2 and progress(root).count("applying q") == 1
    assert writes(stores[1]) == {"p": 1, "q": 1, "r": 1}
    row = run_row(stores[1])
    assert (row["executed_passes"], row["completed"]) == (1, True)
    for s in stores:
        s.dispose()


def test_a_long_pass_that_keeps_applying_renews_its_claim_and_is_not_taken_over(tmp_path, store_url):
    # Times with room for a loaded machine: a renewal late by 0.6 s (a full suite beside real-host
    # boots on two cores) made the 1 s claim of the first version time out.
    root, (a, b), stores = runners(tmp_path, store_url, list("abcde"), lock_ttl="3s", delay=1.2)
    meanwhile = []

    def late(ctx, key):
        if key == "e":  # 4.8 s into a pass whose claim times out after 3 s unless renewed
            meanwhile.append(b.tick(NAME))

    Slow.on_apply = late
    tick = a.tick(NAME)
    assert tick.outcome is TickOutcome.EXECUTED and not tick.stopped, tick.error
    assert [t.outcome for t in meanwhile] == [TickOutcome.SKIPPED]
    assert writes(stores[0]) == dict.fromkeys("abcde", 1)
    for s in stores:
        s.dispose()


def test_a_pass_that_wakes_past_its_claims_timeout_applies_no_further_item(tmp_path, store_url):
    """Nobody took over, so what it did is persisted; but it stops where another could have started."""
    root, (a,), stores = runners(tmp_path, store_url, ["p", "q"], count=1, lock_ttl="1s")

    def hang(ctx, key):
        Slow.on_apply = None
        time.sleep(2.2)  # past the claim's 1 s timeout, with room for a loaded machine

    Slow.on_apply = hang
    tick = a.tick(NAME)
    assert tick.outcome is TickOutcome.EXECUTED and tick.stopped
    assert "claim timed out" in tick.error
    assert progress(root) == ["applying p", "applied p"]
    assert a.tick(NAME).outcome is TickOutcome.EXECUTED
    assert writes(stores[0]) == {"p": 1, "q": 1}
    for s in stores:
        s.dispose()


@pytest.mark.parametrize("store_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
def test_a_taker_not_allowed_to_end_the_hung_session_keeps_the_lease_for_a_later_try(tmp_path, store_url):
    """A replica whose database role may not end another's session (no superuser, no
    pg_signal_backend) takes nothing over; the hung pass is still fenced out, and the lease
    waits for the next try."""
    import uuid

    root, (a,), stores = runners(tmp_path, store_url, ["p", "q"], count=1, lock_ttl="1s")
    role = f"datum_weak_{uuid.uuid4().hex[:8]}"
    writes(stores[0])  # the reconciler's own table exists before the grants
    admin = sa.create_engine(store_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE ROLE "{role}" LOGIN'))
        conn.execute(sa.text(f'GRANT ALL ON ALL TABLES IN SCHEMA public TO "{role}"'))
        conn.execute(sa.text(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO "{role}"'))
    weak = open_store(sa.engine.make_url(store_url).set(username=role).render_as_string(hide_password=False))
    b = Runner(registry(), a.settings, weak)
    other = []

    def hang(ctx, key):
        Slow.on_apply = None
        time.sleep(2.2)  # past the claim's 1 s timeout, with room for a loaded machine
        other.append(b.tick(NAME))

    try:
        Slow.on_apply = hang
        tick = a.tick(NAME)
        assert [t.outcome for t in other] == [TickOutcome.SKIPPED]
        assert tick.outcome is TickOutcome.LOST_CLAIM  # its claim was raised all the same
        with stores[0].connect() as conn:
            holder = conn.execute(sa.select(locks.c.holder).where(locks.c.name == f"reconciler:{NAME}")).scalar()
        assert holder == b.holder  # kept for the next try, not dropped
        assert b.tick(NAME).outcome is TickOutcome.EXECUTED  # the hung pass is gone now
        # p: applied by the hung pass, its status write refused; q: by the later pass
        assert writes(stores[0]) == {"q": 1}
        assert sorted(p.name for p in (root / "items").iterdir()) == ["p", "q"]
    finally:
        weak.dispose()
        for s in stores:
            s.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP OWNED BY "{role}"'))
            conn.execute(sa.text(f'DROP ROLE "{role}"'))
        admin.dispose()

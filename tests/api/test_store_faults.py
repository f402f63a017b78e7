"""Store faults give a clear answer: black-box ``datum`` runs against a read-only, locked or full store.

Each run is a real process on a real SQLite file. The answer is always exit 69
(``UNAVAILABLE``) with a message naming the store and the cause, never exit 70
and never the SQL statement that failed.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SQL_WORDS = ("[SQL:", "INSERT", "UPDATE ", "SELECT ", "Traceback")


def datum(*args: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from datum.cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "DATUM_DEBUG": ""},
    )


def config(tmp_path: Path, db: Path, lock_wait: str = "1s") -> Path:
    cfg = tmp_path / "datum.toml"
    cfg.write_text(
        f'store = "sqlite:///{db}"\n'
        f'[host]\nlock_wait = "{lock_wait}"\n'
        f'[reconcilers.buckets]\nroot = "{tmp_path / "buckets"}"\n'
    )
    return cfg


def assert_clear(run: subprocess.CompletedProcess[str], store: Path, *words: str) -> None:
    """Exit 69, the store named, each of ``words`` said, no SQL and no stack trace."""
    text = run.stdout + run.stderr
    assert run.returncode == 69, text
    assert str(store) in run.stderr, text
    said = run.stderr.replace(str(store), "").lower()  # the words must be the message's, not the path's
    for word in words:
        assert word in said, text
    for sql in SQL_WORDS:
        assert sql not in text, text


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@contextlib.contextmanager
def read_only(db: Path) -> Iterator[None]:
    """Make ``db`` unwritable even for root: ``chattr +i`` (the test runs as root)."""
    done = subprocess.run(["chattr", "+i", str(db)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i is not permitted here: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(db)], capture_output=True)


def fill(folder: Path, leave: int = 0) -> None:
    """Fill ``folder``'s file system, leaving about ``leave`` bytes."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    with contextlib.suppress(OSError), (folder / "filler").open("wb") as f:
        f.write(b"x" * max(0, free - leave))
        f.flush()
        while leave == 0:
            f.write(b"x" * 4096)
            f.flush()


def test_a_locked_store_waits_lock_wait_then_exits_69_naming_it(tmp_path):
    db = tmp_path / "datum.db"
    cfg = config(tmp_path, db, lock_wait="1s")
    assert datum("bucket", "create", "alpha", "--config", str(cfg)).returncode == 0
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        run = datum("bucket", "create", "beta", "--config", str(cfg))
        took = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert_clear(run, db, "locked", "1s")
    assert 1.0 <= took < 8, took  # waited lock_wait, not the old hard-coded 10 s
    assert datum("bucket", "create", "beta", "--config", str(cfg)).returncode == 0  # released: it works again


def test_a_read_only_store_exits_69_naming_it(tmp_path):
    db = tmp_path / "datum.db"
    cfg = config(tmp_path, db)
    assert datum("bucket", "create", "alpha", "--config", str(cfg)).returncode == 0
    with read_only(db):
        run = datum("bucket", "create", "beta", "--config", str(cfg))
        listed = datum("bucket", "list", "--config", str(cfg))
    assert_clear(run, db, "read-only")
    assert listed.returncode == 0 and "alpha" in listed.stdout  # reads still answer


def test_a_full_disk_exits_69_with_the_real_error(tmp_path):
    with small_tmpfs(tmp_path / "small", "2m") as small:
        db = small / "datum.db"
        cfg = config(tmp_path, db)
        assert datum("bucket", "create", "alpha", "--config", str(cfg)).returncode == 0
        fill(small)
        run = datum("bucket", "create", "beta", "--config", str(cfg))
        assert_clear(run, db)
        said = run.stderr.replace(str(db), "")
        assert "disk is full" in said and "no space left on device" in said, run.stderr


BIG = "".join(f"line {i} of the desired content\n" for i in range(8000))


def big_manifest(tmp_path: Path) -> Path:
    manifest = tmp_path / "m.yaml"
    body = "".join(f"        {line}\n" for line in BIG.splitlines())
    manifest.write_text(f"resources:\n  - File[big]:\n      path: /big\n      content: |\n{body}")
    return manifest


def test_apply_on_a_full_disk_prints_the_pass_lines_then_the_real_error(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    manifest = big_manifest(tmp_path)
    with small_tmpfs(tmp_path / "small", "4m") as small:
        state = small / "state.db"
        first = datum("apply", str(manifest), "--root", str(root), "--state", str(state))
        assert first.returncode == 2, first.stderr
        (root / "big").write_text("edited by hand\n")
        fill(small, leave=4 * 1024)  # room to open the store, not for a report with a 20 kB diff
        run = datum("apply", str(manifest), "--root", str(root), "--state", str(state), "--mode", "observe")
    assert run.stdout.startswith("File[big]"), run.stdout + run.stderr  # the pass lines, first
    assert "host state: drifted" in run.stdout
    assert_clear(run, state, "not stored", "full")


def test_apply_on_a_read_only_state_store_prints_the_pass_lines_then_exits_69(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    manifest = tmp_path / "m.yaml"
    manifest.write_text('resources:\n  - File[motd]:\n      path: /motd\n      content: "hello\\n"\n')
    state = tmp_path / "state.db"
    assert datum("apply", str(manifest), "--root", str(root), "--state", str(state)).returncode == 2
    (root / "motd").write_text("edited\n")
    with read_only(state):
        run = datum("apply", str(manifest), "--root", str(root), "--state", str(state))
    assert "File[motd]" in run.stdout and "host state:" in run.stdout, run.stdout + run.stderr
    assert_clear(run, state, "read")


@pytest.fixture
def pg_url(store_url: str) -> str:
    """A fresh PostgreSQL store (the suite's ``store_url``, PostgreSQL only)."""
    if not store_url.startswith("postgresql"):
        pytest.skip("PostgreSQL only: the SQLite faults have tests of their own above")
    return store_url


def test_postgresql_faults_name_the_store_without_its_password(tmp_path, pg_url):
    import sqlalchemy as sa

    wrong = sa.engine.make_url(pg_url).set(password="s3cret-pw", database="datum_no_such_db_here")
    cfg = tmp_path / "datum.toml"
    cfg.write_text(f'store = "{wrong.render_as_string(hide_password=False)}"\n[host]\nlock_wait = "1s"\n')
    run = datum("bucket", "list", "--config", str(cfg))
    assert run.returncode == 69, run.stderr
    assert "s3cret-pw" not in run.stdout + run.stderr and "datum_no_such_db_here" in run.stderr

    cfg.write_text(f'store = "{pg_url}"\n[host]\nlock_wait = "1s"\n')
    assert datum("bucket", "create", "alpha", "--config", str(cfg)).returncode == 0
    holder = sa.create_engine(pg_url)
    with holder.connect() as conn:
        conn.execute(sa.text("LOCK TABLE buckets IN ACCESS EXCLUSIVE MODE"))  # inside the implicit transaction
        # held until datum has answered: a datum that waited on the lock for ever would hang here
        run = datum("bucket", "create", "beta", "--config", str(cfg))
        conn.rollback()
    holder.dispose()
    assert run.returncode == 69, run.stdout + run.stderr
    assert "locked" in run.stderr and "gave up after waiting 1s" in run.stderr, run.stderr
    for sql in SQL_WORDS:
        assert sql not in run.stderr, run.stderr


def test_a_store_file_deleted_under_a_process_is_refused_never_recreated_empty(tmp_path):
    from datum.core.findings import Problem
    from datum.store import open_store
    from datum.store.hosts import record_pass

    db = tmp_path / "datum.db"
    store = open_store(f"sqlite:///{db}")
    store.ping()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    store.engine.dispose()  # the pool's next connection is a new one
    for attempt in (store.ping, lambda: record_pass(store, "web1", {"state": "converged"})):
        with pytest.raises(Problem) as refused:
            attempt()
        assert refused.value.code == "UNAVAILABLE" and str(db) in str(refused.value)
        assert "INSERT" not in str(refused.value)
    with pytest.raises(Problem), store.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
    assert not db.exists()  # no empty store in its place for the next pass to read as "nothing desired"
    store.dispose()


def test_the_api_answers_503_naming_a_locked_store_and_keeps_reading(tmp_path):
    from datetime import timedelta

    from fastapi.testclient import TestClient

    from datum.api.app import create_app
    from datum.api.front import tokens
    from datum.plugins import load as _load_plugins
    from datum.store import open_store

    from .story import pass_report, settings_for

    settings = settings_for(tmp_path)
    store = open_store(settings.store_url, lock_wait=timedelta(milliseconds=300))
    agent = {"Authorization": f"Bearer {tokens.create(store, 'agent', 'web1')}"}
    operator = {"Authorization": f"Bearer {tokens.create(store, 'operator')}"}
    client = TestClient(create_app(settings, _load_plugins().registry(), store), raise_server_exceptions=False)
    assert client.get("/v1/hosts", headers=operator).status_code == 200  # tokens cached, pool warm
    assert client.post("/v1/hosts/web1/passes", json=pass_report(), headers=agent).status_code == 201
    holder = sqlite3.connect(tmp_path / "datum.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        refused = client.post("/v1/hosts/web1/passes", json=pass_report(), headers=agent)
        listed = client.get("/v1/hosts", headers=operator)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert refused.status_code == 503, refused.text
    (issue,) = refused.json()["issues"]
    assert issue["code"] == "UNAVAILABLE" and "locked" in issue["message"]
    assert str(tmp_path / "datum.db") in issue["message"]
    assert not any(word in refused.text for word in SQL_WORDS)
    assert listed.status_code == 200 and listed.json()["hosts"][0]["host"] == "web1"  # readers are not blocked
    client.close()
    store.dispose()


def test_a_database_error_no_store_boundary_caught_is_69_without_its_sql():
    import sqlalchemy as sa

    from datum.cli.main import report_problem, unexpected
    from datum.core.findings import EXIT_UNAVAILABLE

    raw = sqlite3.OperationalError("attempt to write a readonly database")
    wrapped = sa.exc.OperationalError("INSERT INTO hosts (host) VALUES (?)", ("web1",), raw)
    for exc in (raw, wrapped):
        problem = unexpected(exc)
        assert problem.code == "UNAVAILABLE" and "read-only" in str(problem)
        assert "INSERT" not in str(problem) and "[SQL" not in str(problem)
        assert report_problem(problem, as_json=True) == EXIT_UNAVAILABLE


def test_the_intake_of_one_process_writes_a_sqlite_file_one_report_at_a_time(tmp_path):
    """A rollout's wave reports hundreds of passes at once: threads refused SQLite's lock slept in its busy
    handler (up to 100 ms at a time) with the file free again (docs/performance.md, bench rollout). The
    intake's writers of one process take turns (``Store.one_writer``): a report waits for the writer before
    it, at most ``lock_wait``, then is ``UNAVAILABLE`` naming the store; on PostgreSQL nothing is taken."""
    import threading
    from datetime import timedelta

    from datum.store import open_store
    from datum.store.engine import StoreFault
    from datum.store.hosts import take_pass

    store = open_store(f"sqlite:///{tmp_path / 'datum.db'}", lock_wait=timedelta(seconds=0.3))
    other = store.own_pool(2)  # another engine of this process on the same file: the same turn
    report = {"host": "web1", "mode": "enforce", "state": "converged", "startedAt": "2026-12-07T00:00:00+00:00",
              "finishedAt": "2026-12-07T00:00:01+00:00", "durationSeconds": 1.0, "exitCode": 0,
              "counts": {"converged": 0}, "resources": []}
    try:
        stored: list[str] = []
        with store.one_writer():
            late = threading.Thread(target=lambda: stored.append(take_pass(other, "web1", dict(report)).outcome))
            late.start()
            late.join(0.1)
            assert late.is_alive() and not stored, "the second writer waits for the first"
        late.join(5)
        assert stored == ["stored"]
        with store.one_writer():
            failed: list[BaseException] = []

            def refused() -> None:
                try:
                    take_pass(other, "web1", dict(report))
                except StoreFault as exc:
                    failed.append(exc)

            late = threading.Thread(target=refused)
            late.start()
            late.join(5)
        assert failed and "is locked" in str(failed[0]) and str(tmp_path / "datum.db") in str(failed[0])
    finally:
        other.dispose()
        store.dispose()

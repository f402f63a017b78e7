"""Shared fixtures: real stores (SQLite in a temporary directory, PostgreSQL on 127.0.0.1)."""

from __future__ import annotations

import os
import signal
import uuid

import pytest
import sqlalchemy as sa

PG_ADMIN_URL = os.environ.get("DATUM_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """No test reads the machine's configuration or writes to its state directory."""
    monkeypatch.setenv("DATUM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DATUM_CONFIG", raising=False)


@pytest.fixture(scope="session", autouse=True)
def _stores_from_a_template(tmp_path_factory):
    """A store a test opens is a copy of one migrated in this process (tests/store_templates.py says why)."""
    import datum.store.engine as engine
    import store_templates as templates

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "migrate", templates.migrate_from_template(engine.migrate, tmp_path_factory.mktemp("template")))
        yield
    if templates._PG:
        admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        templates.drop_pg_template(admin)
        admin.dispose()


def _pg_database(empty: bool = False):
    """A fresh PostgreSQL database, migrated (a copy of the template) unless ``empty``; dropped afterwards."""
    import store_templates as templates

    name = f"datum_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    if empty:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    else:
        templates.clone_pg(admin, PG_ADMIN_URL, name)
    url = sa.engine.make_url(PG_ADMIN_URL).set(database=name)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"
                ),
                {"n": name},
            )
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request, tmp_path):
    """The URL of an empty store, once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'datum.db'}"
    else:
        yield from _pg_database(_empty(request))


def _empty(request) -> bool:
    """Whether the test is marked ``empty_store``: its PostgreSQL database is made empty, not migrated."""
    return request.node.get_closest_marker("empty_store") is not None


@pytest.fixture
def pg_database(request):
    """The URL of a fresh PostgreSQL database of its own; dropped afterwards."""
    yield from _pg_database(_empty(request))


@pytest.fixture(scope="module")
def pg_module_database(request):
    """The URL of a fresh PostgreSQL database shared by one module's tests; dropped afterwards."""
    yield from _pg_database(_empty(request))


@pytest.fixture
def store(store_url):
    from datum.store import open_store

    s = open_store(store_url)
    yield s
    s.dispose()


@pytest.fixture
def datum_cli(capsys):
    """Run the ``datum`` CLI in-process: ``datum_cli(*args) -> (exit code, stdout, stderr)``."""
    from datum.cli.main import main

    def run(*args: str) -> tuple[int, str, str]:
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def deadline():
    """Fail, rather than hang, when something blocks (opening a FIFO for read does): 10 s, then every second."""

    def expired(_signum, _frame):
        raise TimeoutError("blocked for 10 s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, 10, 1)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def tmpfs():
    """``tmpfs(path, size="1m")`` mounts a small tmpfs at ``path`` until the test ends; skipped where refused."""
    import subprocess

    mounted: list[str] = []

    def mount(path, size: str = "1m"):
        path.mkdir(parents=True, exist_ok=True)
        run = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {run.stderr.strip()}")
        mounted.append(str(path))
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", path], capture_output=True, check=False)


# -- ./scripts/test --quick: the inner loop's tests, chosen here alone -----------------------------
# A test is marked ``quick`` (``pytest -m quick``) when it lives below one of QUICK_DIRS, is in none of
# NOT_QUICK's files (they start ``datum serve``/``datum reconcile`` processes and wait on them, or run a
# soak) and needs no service: no PostgreSQL (the ``postgres`` marker, a ``pg_*`` fixture), no browser,
# no replicas. No servers, no containers, no apt: real SQLite in a temporary directory only.
QUICK_DIRS = ("tests/core/", "tests/cli/", "tests/reconcile/", "tests/test_unpack.py")
NOT_QUICK = (
    "tests/cli/test_help_and_serve.py",
    # a real datum serve per test (fixture served): 4-9 s of setup each, ~2 of the quick set's ~6 worker-minutes
    "tests/cli/test_remote.py",
    "tests/reconcile/test_claims.py",
    "tests/reconcile/test_soak_smoke.py",
)
_SERVICES = {"postgres", "browser", "replicas", "smoke"}
_SERVICE_FIXTURES = {"pg_database", "pg_module_database"}


def pytest_configure(config):
    config.addinivalue_line("markers", "quick: a unit test of ./scripts/test --quick (chosen in tests/conftest.py)")
    config.addinivalue_line("markers", "empty_store: its PostgreSQL databases are made empty, not copied migrated "
                            "(tests/store_templates.py)")


# -- the order the workers take tests in: the longest files first -----------------------------------
# pytest-xdist hands out tests in collection order; a file of minute-long tests taken last keeps one worker
# busy after the others are done. These files held the most of a worker's time in a run of the whole
# suite (2026-12-07, junit times, 3 workers on 2 cores): they go first, in this order, and everything else
# after them in its usual order. Only the order: a file missing here or renamed costs time, never a test.
FIRST = (
    "tests/acceptance/test_contract.py",
    "tests/test_demo.py",
    "tests/agent/test_enroll.py",
    "tests/api/test_rollouts.py",
    "tests/cli/test_remote.py",
    "tests/reconcile/test_claims.py",
    "tests/agent/test_reboot_health.py",
    "tests/agent/test_agent_rollout.py",
    "tests/api/test_pass_history.py",
    "tests/agent/test_agent_serve.py",
    "tests/api/test_audit_log.py",
    "tests/bench/test_bench_smoke.py",
    "tests/agent/test_reboot_budget.py",
    "tests/agent/test_agent_push.py",
    "tests/api/test_schemathesis_live.py",
    "tests/api/test_bench_api_smoke.py",
    "tests/api/test_openapi.py",
    "tests/api/test_openapi_exact.py",
    "tests/agent/test_bad_answers.py",
    "tests/web/test_page.py",
)


def _first(where: str) -> int:
    return FIRST.index(where) if where in FIRST else len(FIRST)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by it
def pytest_collection_modifyitems(config, items):
    root = str(config.rootpath) + "/"
    items.sort(key=lambda item: _first(str(item.path).removeprefix(root)))  # stable: the rest keeps its order
    for item in items:
        where = str(item.path).removeprefix(root)
        if (
            where.startswith(QUICK_DIRS)
            and not where.startswith(NOT_QUICK)
            and not any(item.get_closest_marker(m) for m in _SERVICES)
            and _SERVICE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
        ):
            item.add_marker(pytest.mark.quick)

"""The real-host tests: a booted Debian (systemd as PID 1) per test session, Datum inside.

Every test here is marked ``realhost``. ``./scripts/test`` runs only those also
marked ``smoke`` (seconds); ``scripts/test-host`` runs them all
(``DATUM_REALHOST=all``). Without a built root they skip, saying how to build it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from container import REPO, ROOTFS, Container, unavailable  # noqa: E402

ALL = os.environ.get("DATUM_REALHOST") == "all"


def pytest_configure(config):
    config.addinivalue_line("markers", "realhost: boots a real Debian with systemd-nspawn")
    config.addinivalue_line("markers", "smoke: a real-host test that ./scripts/test runs too")


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.realhost)
            if not ALL and item.get_closest_marker("smoke") is None:
                item.add_marker(
                    pytest.mark.skip(reason="not a smoke test: run scripts/test-host for all")
                )


def _built_meanwhile() -> None:
    """Wait for a build of the Debian root under way: ``./scripts/test`` starts one in the background (its
    lock taken before pytest starts) and does not wait for it; these tests, collected late in the suite, do."""
    lock = ROOTFS.with_name(ROOTFS.name + ".lock")
    if lock.exists():
        with open(lock) as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # released at once: the build is done, or was never under way


@pytest.fixture(scope="session")
def host():
    _built_meanwhile()
    why = unavailable()
    if why:
        pytest.skip(why)
    box = Container()
    start = time.monotonic()
    # Datum inside is the tree under test: the wheelhouse is rebuilt when a source changed,
    # under a lock that parallel workers share until their virtualenv is installed from it.
    with open(REPO / ".cache" / "wheelhouse.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(
            [str(REPO / "scripts" / "test-host"), "wheels"],
            check=True,
            env={**os.environ, "DATUM_WHEELS_LOCKED": "1"},
        )
        box.boot()
        box.install_seconds = box.install_datum()
    box.ready_seconds = time.monotonic() - start
    try:
        yield box
    finally:
        box.shutdown()

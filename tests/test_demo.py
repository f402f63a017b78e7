"""./scripts/demo tells the whole story, off a terminal, and ends."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_demo_tells_the_story():
    env = {k: v for k, v in os.environ.items() if k not in ("DATUM_HOME", "DATUM_CONFIG")}
    done = subprocess.run(
        [str(ROOT / "scripts" / "demo")],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    for expected in (
        "blocked_on_owner",  # logs parked on its tenant
        "circuit_breaker",  # strays held back
        "backoff",  # the squatted name waits out its window
        "not a directory",  # ... and says why
        "STRANDED",  # the forgetful work query, caught by coverage
        "host state: degraded",  # the host agent's example, Service skipped
        "UNAUTHENTICATED",  # the server refuses a request without a token
    ):
        assert expected in out, expected
    assert "Traceback" not in out + done.stderr

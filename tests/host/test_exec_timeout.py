"""The ``Exec`` timeout kills the command's whole process group, grandchildren included."""

from __future__ import annotations

import os
import time
from pathlib import Path

from datum.providers.base import run


def _gone(pid: int, seconds: float = 10) -> bool:
    """Whether ``pid`` exits (a zombie waiting for its reaper counts as gone)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except (OSError, IndexError):
            return True
        time.sleep(0.05)
    return False


def _kill(*pids: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


# One grandchild lets go of the output pipes, one keeps them: both must die, and soon.
GRANDCHILDREN = (
    'sleep 60 >/dev/null 2>&1 & echo $! > "{d}/quiet.pid"; '
    'sleep 61 & echo $! > "{d}/loud.pid"; wait'
)


def _pids(d: Path) -> tuple[int, int]:
    return int((d / "quiet.pid").read_text()), int((d / "loud.pid").read_text())


def test_run_kills_the_process_group_on_timeout(tmp_path):
    started = time.monotonic()
    done = run(["/bin/sh", "-c", GRANDCHILDREN.format(d=tmp_path)], timeout=1)
    quiet, loud = _pids(tmp_path)
    try:
        assert done.returncode == 124
        assert "timed out after 1" in done.stderr
        assert time.monotonic() - started < 8
        assert _gone(quiet) and _gone(loud)
    finally:
        _kill(quiet, loud)


def test_exec_timeout_kills_grandchildren(host):
    manifest = host.manifest(
        "resources:\n  - Exec[spawner]:\n"
        f"      command: '{GRANDCHILDREN.format(d='$DATUM_ROOT')}'\n"
        "      timeout: 1\n"
    )
    started = time.monotonic()
    result = host.apply(manifest)
    quiet, loud = _pids(host.root)
    try:
        assert result.code == 4, result.out + result.err
        assert result.line("Exec[spawner]").startswith("failed: exit status 124: timed out after 1")
        assert time.monotonic() - started < 15  # not the grandchildren's 60 s
        assert _gone(quiet) and _gone(loud)
    finally:
        _kill(quiet, loud)


def test_a_guard_that_times_out_is_a_failure_not_a_no(host):
    """``unless`` killed at the timeout answered nothing: the command must not run on that."""
    manifest = host.manifest(
        "resources:\n  - Exec[guarded]:\n"
        "      command: 'touch \"$DATUM_ROOT/ran\"'\n"
        "      unless: 'sleep 30'\n"
        "      timeout: 1\n"
    )
    result = host.apply(manifest)
    assert result.code == 4, result.out + result.err
    assert result.line("Exec[guarded]").startswith("failed: unless timed out after 1")
    assert not (host.root / "ran").exists()

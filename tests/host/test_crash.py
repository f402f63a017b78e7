"""A crash never blocks the next pass, and never lies: SIGKILL, SIGTERM and a dead lease holder.

``datum apply`` runs as a real process here, on a manifest whose ``Exec``
sleeps, and is killed in the middle of it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from contextlib import suppress
from pathlib import Path

from datum.host.statefile import lock_path

from .conftest import DATUM, Host

SLOW = """resources:
  - File[/first]:
      content: "1\\n"
  - Exec[slow]:
      command: 'echo $$ > "$DATUM_ROOT/slow.pid"; {tail}'
      unless: 'test -e "$DATUM_ROOT/fast"'
  - File[/second]:
      content: "2\\n"
  - File[/third]:
      content: "3\\n"
"""


def _spawn(host: Host, manifest: Path, *args: str, state: str | None = None) -> subprocess.Popen[str]:
    """``datum apply`` in the background, as the ``host`` fixture runs it."""
    env = {**os.environ, "DATUM_HOME": str(host.base / "home"), "DATUM_BOOT_ID_FILE": str(host.boot_id)}
    env.pop("DATUM_CONFIG", None)
    if host.config.exists():
        env["DATUM_CONFIG"] = str(host.config)
    argv = [DATUM, "apply", str(manifest), "--root", str(host.root), "--state", state or str(host.state), *args]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc: subprocess.Popen[str], seconds: float = 30) -> int:
    """The pid the slow Exec wrote, once it runs."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with suppress(OSError, ValueError):
            return int(path.read_text())
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def _kill(pid: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def test_sigkill_mid_pass_leaves_status_unknown_and_never_blocks_the_next_pass(host):
    host.configure('[host]\nlock_wait = "1s"\n')
    manifest = host.manifest(SLOW.format(tail="exec sleep 60"))
    assert host.apply(host.manifest("resources: []\n", "empty.yaml")).code == 0  # a completed pass first
    proc = _spawn(host, manifest)
    sleeper = _wait_for(host.root / "slow.pid", proc)
    try:
        # While it runs: a second pass waits lock_wait for the live holder, then refuses naming it.
        busy = host.apply(manifest)
        assert busy.code == 69, busy.out + busy.err
        assert str(proc.pid) in busy.err  # names the holder
        running = host.status()
        assert "a pass is running since" in running.out and f"(pid {proc.pid})" in running.out

        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        _kill(sleeper)
    status = host.status("--json").json
    assert status["state"] == "unknown"
    assert re.fullmatch(rf"the pass started at \S+ did not finish \(pid {proc.pid}\)", status["reason"]), status
    assert status["lastReport"]["state"] == "converged"  # kept, and not shown as current
    text = host.status()
    assert "host state: unknown" in text.out and "did not finish" in text.out

    (host.root / "fast").touch()
    host.configure('[host]\nlock_wait = "30s"\n')  # before: the dead lease blocked for lock_ttl (1h), exit 69
    started = time.monotonic()
    after = host.apply(manifest)
    assert after.code == 2, after.out + after.err  # at once: no wait, no 69
    assert time.monotonic() - started < 20
    assert f"did not finish (pid {proc.pid}); this pass replaces it" in after.err
    assert host.status("--json").json["state"] == "converged"
    assert os.path.getsize(lock_path(str(host.state))) == 0  # a finished pass leaves no record


def test_sigterm_stops_after_the_current_resource_and_persists_an_incomplete_report(host):
    host.configure('[host]\nlock_wait = "100ms"\n')
    manifest = host.manifest(SLOW.format(tail='sleep 1; touch "$DATUM_ROOT/fast"'))
    proc = _spawn(host, manifest, "--json")
    _wait_for(host.root / "slow.pid", proc)
    proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - signalled < 10  # the current resource (1 s) and no more
    assert proc.returncode == 2 | 4, err  # changed, and the pass did not finish (bit 4)
    report = __import__("json").loads(out)
    assert report["incomplete"] is True
    assert report["state"] == "unknown"
    assert report["reason"] == "the pass was stopped by SIGTERM after 2 of 4 resources; 2 not reached (pending)"
    states = {r["id"]: r["state"] for r in report["resources"]}
    assert states == {"File[/first]": "converged", "Exec[slow]": "converged", "File[/second]": "pending", "File[/third]": "pending"}
    assert not (host.root / "second").exists()

    status = host.status("--json").json
    assert status == report  # what completed was persisted, marked incomplete
    assert "incomplete" in host.status().out
    again = host.apply(manifest)  # the lock was released: a 100 ms lock_wait is enough
    assert again.code == 2, again.out + again.err
    assert (host.root / "third").read_text() == "3\n"
    assert host.status("--json").json["state"] == "converged"


def _gone_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def test_a_record_left_after_the_report_was_stored_is_not_a_dead_pass(host):
    """Killed between persisting its report and emptying its record: that pass did finish."""
    import json
    from datetime import UTC, datetime

    manifest = host.manifest("resources: []\n")
    assert host.apply(manifest).code == 0
    finished = datetime.fromisoformat(host.status("--json").json["finishedAt"])
    record = {"holder": "x", "node": os.uname().nodename, "pid": _gone_pid(), "bootId": "boot-1"}
    lock = Path(lock_path(str(host.state)))
    lock.write_text(json.dumps({**record, "startedAt": (finished.replace(microsecond=0)).isoformat()}))
    assert host.status("--json").json["state"] == "converged"
    later = datetime.now(UTC).isoformat()
    lock.write_text(json.dumps({**record, "startedAt": later}))
    status = host.status("--json").json
    assert status["state"] == "unknown" and status["reason"] == f"the pass started at {later} did not finish (pid {record['pid']})"

"""No answer stops the agent: each fault of a server (``faulty.Faulty`` on loopback), on the manifest's
fetch and on the report's post, is a finding in the report; the last good manifest is applied and the
report is kept until a server takes it, in order."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest

from datum.agent.loop import Options, cycle
from datum.config import load_settings
from datum.core.vocab import Mode
from datum.host.compiled import HostConfig

from .conftest import DATUM
from .faulty import faulty
from .statefile import last_report


def _options(tmp_path: Path, server: str, deadline: float = 3.0) -> Options:
    (tmp_path / "root").mkdir(exist_ok=True)
    (tmp_path / "boot_id").write_text("boot-1\n")
    (tmp_path / "agent.toml").write_text(
        f'home = "{tmp_path / "home"}"\n[host]\nname = "h1"\nboot_id_file = "{tmp_path / "boot_id"}"\n'
    )
    config = HostConfig.from_settings(load_settings(str(tmp_path / "agent.toml")))
    return Options(
        server=server, token="t0ken", root=str(tmp_path / "root"), state_path=str(tmp_path / "agent.db"),
        config=config, mode=Mode.ENFORCE, interval=timedelta(seconds=1), splay=timedelta(0), deadline=deadline,
    )


def _spooled(opts: Options) -> list[int]:
    db = sqlite3.connect(opts.state_path)
    try:
        return [r[0] for r in db.execute("SELECT seq FROM agent_spool ORDER BY seq")]
    finally:
        db.close()


FETCH_FAULTS = {
    "malformed": "the server's manifest is not one",
    "nested": "nested too deeply",
    "nul": "names a file it cannot hold",
    "climbing": "names a file outside it",
    "truncated": "cut short",
    "hangup": "cut short",
    "error": "answered 503 Service Unavailable: down for a bit",
    "slow": "no whole answer within 3s",
    "slow-headers": "no whole answer within 3s",
    "large": "more than the 16 MiB an answer may be",
    "huge": "answered 286.102 MiB, more than the 16 MiB",
}


@pytest.mark.parametrize("fault", sorted(FETCH_FAULTS))
def test_an_unusable_manifest_answer_is_a_finding_and_the_last_good_manifest_is_applied(tmp_path: Path, fault: str):
    with faulty() as server:
        opts = _options(tmp_path, server.url)
        first = cycle(opts)
        good = Path(opts.root) / "srv" / "good.txt"
        assert first.report["state"] == "converged" and good.read_text() == "good\n", first.line
        good.unlink()  # drift, for the last good manifest to repair
        server.manifest = fault
        began = time.monotonic()
        done = cycle(opts)
        took = time.monotonic() - began
        origin = done.report["manifestOrigin"]
        assert origin.startswith("cached: ") and FETCH_FAULTS[fault] in origin, origin
        assert "applied the manifest fetched at" in origin and len(origin) <= 500
        assert good.read_text() == "good\n"  # the last good manifest, applied
        assert done.report["state"] == "converged" and done.exit_code == 2
        assert server.received == [first.report["seq"], done.report["seq"]]  # reported, in order
        assert took < 15, took  # a deadline for the whole answer, not for each byte
        if fault in ("large", "huge"):
            assert server.sent_bytes < 40 * 2**20  # cut near the bound, never read whole
        assert [p.name for p in Path(f"{opts.state_path}.manifest").iterdir()] == ["sha256-" + "ab" * 32]
        assert not (tmp_path / "outside").exists()


POST_FAULTS = {
    "hangup": "cut short",
    "error": "answered 503 Service Unavailable: down for a bit",
    "slow-headers": "no whole answer within 3s",
    # A 2xx status is the server taking the report: its body, however bad, is not read.
    "nested": None,
    "truncated": None,
    "slow": None,
    "huge": None,
}


@pytest.mark.parametrize("fault", sorted(POST_FAULTS))
def test_an_unusable_post_answer_keeps_the_report_for_the_next_delivery_in_order(tmp_path: Path, fault: str):
    with faulty() as server:
        opts = _options(tmp_path, server.url)
        server.passes = fault
        done = cycle(opts)
        seq = done.report["seq"]
        why = POST_FAULTS[fault]
        if why is None:
            assert _spooled(opts) == [] and "delivered 1" in done.line
            return
        assert "1 kept for later: " in done.line and why in done.line, done.line
        assert _spooled(opts) == [seq]
        again = cycle(opts)
        assert _spooled(opts) == [seq, seq + 1]
        server.passes = "ok"
        last = cycle(opts)
        assert "delivered 3" in last.line and _spooled(opts) == []
        assert server.received == [seq, seq + 1, seq + 2] == [seq, again.report["seq"], last.report["seq"]]


def test_with_no_good_manifest_ever_an_unusable_answer_reports_unknown_saying_why(tmp_path: Path):
    with faulty() as server:
        opts = _options(tmp_path, server.url)
        server.manifest = "nested"
        done = cycle(opts)
        assert done.exit_code == 4 and done.report["state"] == "unknown"
        assert "no manifest has ever been fetched" in done.report["reason"] and "nested too deeply" in done.report["reason"]
        assert server.received == [done.report["seq"]]


def _agent_argv(tmp_path: Path, server: str, *extra: str) -> tuple[list[str], dict[str, str]]:
    opts = _options(tmp_path, server)
    (tmp_path / "token").write_text("t0ken\n")
    (tmp_path / "token").chmod(0o600)
    argv = [*DATUM, "agent", "--server", server, "--token-file", str(tmp_path / "token"), "--root", opts.root,
            "--state", opts.state_path, "--config", str(tmp_path / "agent.toml"), *extra]
    return argv, {**os.environ, "DATUM_HOME": str(tmp_path / "home")}


@pytest.mark.parametrize("fault", ["nested", "nul", "truncated", "malformed"])
def test_datum_agent_once_reports_through_a_bad_answer(tmp_path: Path, fault: str):
    """Before: exit 70 with no report (a RecursionError, a ValueError on the NUL byte, an IncompleteRead)."""
    with faulty() as server:
        argv, env = _agent_argv(tmp_path, server.url, "--once")
        assert subprocess.run(argv, env=env, capture_output=True, timeout=120).returncode == 2
        server.manifest = fault
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "manifest sha256:" in done.stderr and "delivered 1" in done.stderr
        assert len(server.received) == 2


def test_the_agent_loop_lives_through_every_fault_of_its_server(tmp_path: Path):
    with faulty() as server:
        argv, env = _agent_argv(tmp_path, server.url, "--interval", "1s", "--splay", "0s")
        logged = (tmp_path / "agent.log").open("w")  # a file, not a pipe: a loop's lines never fill it and stop it
        proc = subprocess.Popen(argv, env=env, stderr=logged, text=True)
        try:
            for fault in ["nested", "nul", "malformed", "truncated", "hangup", "error", "large", "huge"]:
                server.manifest = fault
                server.passes = "hangup" if fault in ("nested", "truncated", "huge") else "ok"
                time.sleep(2)  # a cycle or two (interval 1s)
                assert proc.poll() is None, (tmp_path / "agent.log").read_text()
            server.manifest = server.passes = "ok"
            deadline = time.monotonic() + 60
            db = Path(tmp_path / "agent.db")
            # recovered: every report delivered, and the latest pass ran the good manifest (a spool can drain
            # by a delivery retried between cycles before the next pass has fetched it)
            while time.monotonic() < deadline:
                kept = sqlite3.connect(db).execute("SELECT count(*) FROM agent_spool").fetchone()[0]
                if kept == 0 and last_report(db)["state"] == "converged":
                    break
                time.sleep(0.2)
            assert kept == 0
            assert server.received == sorted(server.received) and len(set(server.received)) == len(server.received)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
            logged.close()
        assert code == 0
        log = (tmp_path / "agent.log").read_text()
        assert "Traceback" not in log and "the cycle failed" not in log, log
        assert last_report(db)["state"] == "converged"

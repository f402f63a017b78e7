"""Nothing beside the state file is followed: real links (and a FIFO) planted at the state file, its
manifest directory and its lock are refused with a message naming them, and what they lead to is
left as it was. Before: a ``<state>.manifest`` link emptied its target; a lock link had its target
truncated by ``datum agent`` and ``datum apply --state``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import DATUM
from .faulty import faulty


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("precious\n")
    return outside


def _agent(tmp_path: Path, url: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "root").mkdir(exist_ok=True)
    (tmp_path / "boot_id").write_text("boot-1\n")
    (tmp_path / "agent.toml").write_text(f'[host]\nname = "h1"\nlock_wait = "1s"\nboot_id_file = "{tmp_path / "boot_id"}"\n')
    (tmp_path / "token").write_text("t0ken\n")
    (tmp_path / "token").chmod(0o600)
    argv = [*DATUM, "agent", "--server", url, "--token-file", str(tmp_path / "token"), "--root", str(tmp_path / "root"),
            "--state", str(tmp_path / "agent.db"), "--config", str(tmp_path / "agent.toml"), "--once"]
    env = {**os.environ, "DATUM_HOME": str(tmp_path / "home")}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def _apply(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "agent.toml").write_text('[host]\nname = "h1"\nlock_wait = "1s"\n')
    (tmp_path / "m.yaml").write_text("resources:\n  - File[/x]:\n      content: x\n")
    (tmp_path / "root").mkdir(exist_ok=True)
    argv = [*DATUM, "apply", str(tmp_path / "m.yaml"), "--root", str(tmp_path / "root"),
            "--state", str(tmp_path / "agent.db"), "--config", str(tmp_path / "agent.toml")]
    env = {**os.environ, "DATUM_HOME": str(tmp_path / "home")}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def test_a_manifest_directory_that_is_a_link_is_refused_and_its_target_left_whole(tmp_path: Path):
    outside = _outside(tmp_path)
    (outside / "sub").mkdir()
    (tmp_path / "agent.db.manifest").symlink_to(outside, target_is_directory=True)
    with faulty() as server:
        done = _agent(tmp_path, server.url)
        assert done.returncode == 4, done.stderr  # unknown: nothing applied, and said why
        assert "agent.db.manifest is not the agent's directory" in done.stderr
        assert len(server.received) == 1  # still reported
    assert sorted(p.name for p in outside.iterdir()) == ["keep", "sub"]
    assert (outside / "keep").read_text() == "precious\n"
    assert not (tmp_path / "root" / "srv").exists()


@pytest.mark.parametrize("command", ["agent", "apply"])
def test_a_lock_that_is_a_link_is_refused_and_its_target_never_truncated(tmp_path: Path, command: str):
    outside = _outside(tmp_path)
    (tmp_path / "agent.db.host-pass.lock").symlink_to(outside / "keep")
    with faulty() as server:
        done = _agent(tmp_path, server.url) if command == "agent" else _apply(tmp_path)
    assert done.returncode == 69, done.stderr
    assert "agent.db.host-pass.lock is a symbolic link: refused" in done.stderr
    assert (outside / "keep").read_text() == "precious\n"
    assert not (tmp_path / "root" / "x").exists()


def test_a_lock_that_is_a_fifo_or_a_directory_is_refused_without_waiting(tmp_path: Path):
    lock = tmp_path / "agent.db.host-pass.lock"
    os.mkfifo(lock)
    with faulty() as server:
        done = _agent(tmp_path, server.url)
        assert done.returncode == 69 and "is not a regular file: refused" in done.stderr, done.stderr
        lock.unlink()
        lock.mkdir()
        done = _agent(tmp_path, server.url)
        assert done.returncode == 69 and "host-pass.lock is" in done.stderr, done.stderr


def test_a_state_file_that_is_a_link_is_refused_and_its_target_left_whole(tmp_path: Path):
    outside = _outside(tmp_path)
    (tmp_path / "agent.db").symlink_to(outside / "keep")
    (tmp_path / "agent.toml").write_text('[host]\nname = "h1"\n')
    with faulty() as server:
        done = _agent(tmp_path, server.url)
        assert done.returncode == 69, done.stderr
        assert "the state file" in done.stderr and "is a symbolic link: refused" in done.stderr
        applied = _apply(tmp_path)
        assert applied.returncode == 69 and "is a symbolic link: refused" in applied.stderr, applied.stderr
    assert (outside / "keep").read_text() == "precious\n" and sorted(os.listdir(outside)) == ["keep"]
    # a dangling link: nothing is made where it points
    (tmp_path / "agent.db").unlink()
    (tmp_path / "agent.db").symlink_to(outside / "made")
    with faulty() as server:
        assert _agent(tmp_path, server.url).returncode == 69
    assert sorted(os.listdir(outside)) == ["keep"]


def test_a_new_state_file_is_made_private(tmp_path: Path):
    with faulty() as server:
        assert _agent(tmp_path, server.url).returncode == 2
    assert (tmp_path / "agent.db").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "agent.db.manifest").stat().st_mode & 0o777 == 0o700

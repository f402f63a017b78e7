"""``scripts/test-host`` builds the real-host tests' Debian root only where root alone may write: the root it boots
as root is the folder's, so a folder another user owns or may write is refused before anything is written there."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "test-host"


def _build(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), "build"], env={**os.environ, "DATUM_TEST_ROOT": str(root)},
                          capture_output=True, text=True, timeout=60)


def test_the_root_is_where_test_host_says_and_datum_test_root_moves_it(tmp_path: Path) -> None:
    said = subprocess.run([str(SCRIPT), "root"], env={**os.environ, "DATUM_TEST_ROOT": str(tmp_path / "r")},
                          capture_output=True, text=True, check=True)
    assert said.stdout.strip() == str(tmp_path / "r")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root boots the root: the check is root's")
@pytest.mark.parametrize("how", ["writable by others", "another user's"])
def test_a_folder_root_does_not_hold_alone_is_refused_before_anything_is_written(tmp_path: Path, how: str) -> None:
    parent = tmp_path / "cache"
    parent.mkdir()
    if how == "writable by others":
        parent.chmod(0o777)
    else:
        os.chown(parent, 65534, 65534)
    done = _build(parent / "debian-root")
    assert done.returncode == 1 and f"{parent} must be root's and writable by root alone" in done.stderr, done.stderr
    assert list(parent.iterdir()) == []  # no lock, no root, no link followed

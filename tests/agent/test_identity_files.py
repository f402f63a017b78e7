"""The host's key and its enrollment record are Datum's own files beside the state file, where an ordinary user
may have planted a link or a file of their own (contract section 8): each is read from the object checked
(opened without following a link, owned by the user Datum runs as, private) and written without ever writing
through a link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from datum.agent.identity import Enrolled, key_here, key_path, load_key, record_path
from datum.bounded import Unusable

NOBODY = 65534


@pytest.fixture
def state(tmp_path: Path) -> str:
    return str(tmp_path / "agent.db")


def test_the_record_is_never_written_through_a_link_planted_beside_it(state: str, tmp_path: Path):
    victim = tmp_path / "shadow"
    victim.write_text("root:x:0:\n")
    os.symlink(victim, record_path(state) + ".tmp")  # where a temporary name was once guessable
    os.symlink(victim, record_path(state))
    Enrolled("https://datum.example", "web1", "sha256:ab").write(state)
    assert victim.read_text() == "root:x:0:\n"
    assert not os.path.islink(record_path(state)) and os.stat(record_path(state)).st_mode & 0o777 == 0o600
    assert Enrolled.read(state) == Enrolled("https://datum.example", "web1", "sha256:ab")


def test_a_key_or_record_that_is_a_link_or_another_user_s_is_refused(state: str, tmp_path: Path):
    mine = key_here(key_path(str(tmp_path / "other.db")))  # a good key, elsewhere
    assert mine is not None
    os.symlink(key_path(str(tmp_path / "other.db")), key_path(state))
    with pytest.raises(Unusable, match="is a link"):
        key_here(key_path(state))
    os.unlink(key_path(state))
    key_here(key_path(state))
    os.chown(key_path(state), NOBODY, NOBODY)
    with pytest.raises(Unusable, match="belongs to uid 65534"):
        load_key(key_path(state))
    os.chown(key_path(state), os.geteuid(), os.getegid())
    os.chmod(key_path(state), 0o644)
    with pytest.raises(Unusable, match="chmod 600"):
        load_key(key_path(state))
    Enrolled("https://datum.example", "web1", "sha256:ab").write(state)
    os.chmod(record_path(state), 0o666)  # anyone could have rewritten whom the agent trusts
    with pytest.raises(Unusable, match="chmod 600"):
        Enrolled.read(state)

"""The fleet directory's signature (the key of every remembered effective manifest): any edit moves it,
and a directory left alone costs a ``stat`` per path, not a walk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from datum.fleet import effective as eff


@pytest.fixture
def walks(monkeypatch) -> list[Path]:
    seen: list[Path] = []
    real = eff._walk

    def counted(directory: Path) -> list[str]:
        seen.append(directory)
        return real(directory)

    monkeypatch.setattr(eff, "_walk", counted)
    return seen


def _bump(path: Path) -> None:
    """Move ``path``'s mtime on, whatever the clock's granularity."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def test_every_kind_of_edit_moves_the_signature_and_nothing_else_walks(tmp_path: Path, walks):
    fleet = tmp_path / "fleet"
    (fleet / "roles").mkdir(parents=True)
    (fleet / "nodes.yaml").write_text("nodes: []\n")
    (fleet / "roles" / "web.yaml").write_text("resources: []\n")
    first = eff.signature(fleet)
    assert [eff.signature(fleet) for _ in range(5)] == [first] * 5
    assert len(walks) == 1  # remembered: the five answers cost a stat per path

    seen = {first}

    def moved() -> str:
        now = eff.signature(fleet)
        assert now not in seen
        seen.add(now)
        assert eff.signature(fleet) == now  # and stays put until the next edit
        return now

    (fleet / "roles" / "web.yaml").write_text("resources: [] \n")  # written: size and mtime
    moved()
    web = fleet / "roles" / "web.yaml"
    web.write_text("resources: []!\n")  # the same size
    _bump(web)
    moved()
    spare = fleet / "spare.yaml"
    spare.write_text("resources: []?\n")  # the same size, replaced by a rename
    _bump(spare)
    os.replace(spare, web)
    moved()
    (fleet / "roles" / "new").mkdir()  # a subdirectory, then a file in it
    moved()
    (fleet / "roles" / "new" / "db.yaml").write_text("resources: []\n")
    moved()
    (fleet / "roles" / "new" / "db.yaml").unlink()  # removed
    moved()


def test_the_fast_path_lookup_sees_an_edit_at_once(tmp_path: Path):
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    (fleet / "nodes.yaml").write_text("nodes:\n  - match: {name: '*'}\n    manifests: [web.yaml]\n")
    (fleet / "web.yaml").write_text("resources:\n  - File[/etc/a]:\n      content: \"a\\n\"\n")
    made = eff.effective(fleet, "web1", {})
    assert eff.remembered(fleet.resolve(), "web1", {}) == made
    (fleet / "web.yaml").write_text("resources:\n  - File[/etc/b]:\n      content: \"b\\n\"\n")
    assert eff.remembered(fleet.resolve(), "web1", {}) is None  # composed again by the route
    again = eff.effective(fleet, "web1", {})
    assert again.digest != made.digest and b"/etc/b" in again.body

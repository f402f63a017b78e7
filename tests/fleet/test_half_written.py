"""An effective manifest is never composed from a file half written.

A file written in place (an editor without a rename, ``cp``, ``git checkout``)
is for a moment a shorter file, which may still validate: served, an agent
would converge to half a manifest. ``effective`` composes only from files that
have held still for ``QUIET`` and did not move while they were read.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from datum.core.findings import Problem
from datum.fleet import effective as eff

NODES = "nodes:\n  - match: {name: 'web*'}\n    manifests: [web.yaml]\n"
WHOLE = "resources:\n  - File[/etc/motd]:\n      content: hello\n  - File[/etc/issue]:\n      content: hi\n"
HALF = "resources:\n  - File[/etc/motd]:\n      content: hello\n"  # a prefix that validates on its own


def _aged(path: Path, seconds: float = 10.0) -> None:
    then = time.time_ns() - int(seconds * 1e9)
    os.utime(path, ns=(then, then))


def _fleet(tmp_path: Path) -> Path:
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    (fleet / "nodes.yaml").write_text(NODES)
    (fleet / "web.yaml").write_text(WHOLE)
    for path in (fleet / "nodes.yaml", fleet / "web.yaml", fleet):
        _aged(path)
    return fleet.resolve()


def _files_in(found: eff.Effective) -> list[str]:
    import json

    return [next(iter(r)) for r in json.loads(found.shared)["manifest"]["resources"]]


def test_a_file_being_written_is_waited_for_and_read_whole(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    answers: list[eff.Effective] = []
    with open(fleet / "web.yaml", "w") as out:  # truncated: being written in place
        out.write(HALF)
        out.flush()
        asking = threading.Thread(target=lambda: answers.append(eff.effective(fleet, "web1", {})))
        asking.start()
        time.sleep(0.1)  # the request is in while the file is half written
        out.write(WHOLE.removeprefix(HALF))
    asking.join(30)
    assert [_files_in(a) for a in answers] == [["File[/etc/motd]", "File[/etc/issue]"]]


def test_a_file_that_moves_while_it_is_read_is_read_again_and_the_older_read_not_remembered(
    tmp_path: Path, monkeypatch
) -> None:
    fleet = _fleet(tmp_path)
    real = eff._effective
    reads: list[str] = []

    def read_during_a_write(directory, host, facts, state):  # type: ignore[no-untyped-def]
        reads.append(state)
        found = real(directory, host, facts, state)
        if len(reads) == 1:  # the edit lands while the first composition is being made
            (fleet / "web.yaml").write_text(HALF)
        return found

    monkeypatch.setattr(eff, "_effective", read_during_a_write)
    found = eff.effective(fleet, "web1", {})
    assert _files_in(found) == ["File[/etc/motd]"]  # what the file now holds
    assert len(reads) == 2 and reads[0] != reads[1]
    assert not any(key[3] == reads[0] for key in eff._CACHE if key[0] == str(fleet))


def test_a_directory_that_never_holds_still_is_unavailable_not_composed(tmp_path: Path, monkeypatch) -> None:
    fleet = _fleet(tmp_path)
    monkeypatch.setattr(eff, "QUIET", 0.5)  # the writer would have to be held up ten times its pace to look still
    monkeypatch.setattr(eff, "SETTLE_BY", 1.2)
    stop, writing = threading.Event(), threading.Event()

    def keep_writing() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            (fleet / "web.yaml").write_text(WHOLE + f"# {n}\n")
            writing.set()
            time.sleep(0.05)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    writing.wait(10)
    try:
        with pytest.raises(Problem) as raised:
            eff.effective(fleet, "web1", {})
    finally:
        stop.set()
        writer.join()
    assert raised.value.code == "UNAVAILABLE" and "did not hold still" in str(raised.value)


def test_a_still_directory_and_a_time_from_the_future_are_not_waited_for(tmp_path: Path, monkeypatch) -> None:
    fleet = _fleet(tmp_path)
    slept: list[float] = []
    monkeypatch.setattr(eff.time, "sleep", slept.append)
    eff.effective(fleet, "web1", {})
    ahead = time.time_ns() + 3_600 * 10**9  # copied with its times from a machine whose clock is ahead
    (fleet / "web.yaml").write_text(HALF)
    os.utime(fleet / "web.yaml", ns=(ahead, ahead))
    _aged(fleet)
    assert _files_in(eff.effective(fleet, "web1", {})) == ["File[/etc/motd]"]
    assert slept == []


def test_a_revision_is_named_for_the_whole_file_not_the_half(tmp_path: Path) -> None:
    from datum.fleet.revision import content_digest, revision

    fleet = _fleet(tmp_path)
    named: list[str] = []
    with open(fleet / "web.yaml", "w") as out:
        out.write(HALF)
        out.flush()
        asking = threading.Thread(target=lambda: named.append(revision(fleet).id))
        asking.start()
        time.sleep(0.1)
        out.write(WHOLE.removeprefix(HALF))
    asking.join(30)
    assert named == ["sha256:" + content_digest(fleet)]

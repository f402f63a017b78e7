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

    def read_during_a_write(directory, host, facts, state, labels):  # type: ignore[no-untyped-def]
        reads.append(state)
        found = real(directory, host, facts, state, labels)
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
            stop.wait(0.05)  # not time.sleep: the test replaces it below, for every thread of the process

    writer = threading.Thread(target=keep_writing)
    writer.start()
    writing.wait(10)
    slept: list[float] = []
    try:
        with pytest.raises(Problem) as raised:
            eff.effective(fleet, "web1", {})
        monkeypatch.setattr(eff.time, "sleep", slept.append)
        with pytest.raises(Problem) as again:  # while it keeps moving, the next read gives up at once
            eff.effective(fleet, "web2", {})
    finally:
        stop.set()
        writer.join()
    assert raised.value.code == again.value.code == "UNAVAILABLE" and "did not hold still" in str(raised.value)
    assert slept == []


def test_stillness_is_seen_by_the_server_s_clock_not_inferred_from_mtimes(tmp_path: Path, monkeypatch) -> None:
    """A file dated in the future (a time copied from elsewhere, a file server's clock ahead) does not make the
    directory look still; a directory seen still is not waited for again."""
    fleet = _fleet(tmp_path)
    ahead = time.time_ns() + 3_600 * 10**9
    os.utime(fleet / "nodes.yaml", ns=(ahead, ahead))
    answers: list[eff.Effective] = []
    with open(fleet / "web.yaml", "w") as out:
        out.write(HALF)
        out.flush()
        asking = threading.Thread(target=lambda: answers.append(eff.effective(fleet, "web1", {})))
        asking.start()
        time.sleep(0.1)
        out.write(WHOLE.removeprefix(HALF))
    asking.join(30)
    assert [_files_in(a) for a in answers] == [["File[/etc/motd]", "File[/etc/issue]"]]

    def no_sleep(_seconds: float) -> None:
        raise AssertionError("waited for a directory already seen still")

    monkeypatch.setattr(eff.time, "sleep", no_sleep)
    assert eff.held_still(fleet, lambda state: state)[1] == eff.signature(fleet)


def test_a_dangling_link_in_the_directory_is_a_file_like_any_other(tmp_path: Path, monkeypatch) -> None:
    """An editor's lock file (``.#web.yaml``, a link to nothing) neither changes the signature at every look nor
    keeps the directory from holding still."""
    fleet = _fleet(tmp_path)
    (fleet / ".#web.yaml").symlink_to("alice@host.4242:1700000000")
    composed: list[str] = []
    real = eff._effective

    def counted(directory, host, facts, state, labels):  # type: ignore[no-untyped-def]
        composed.append(state)
        return real(directory, host, facts, state, labels)

    monkeypatch.setattr(eff, "_effective", counted)
    assert eff.signature(fleet) == eff.signature(fleet)
    assert _files_in(eff.effective(fleet, "web1", {})) == ["File[/etc/motd]", "File[/etc/issue]"]
    assert len(composed) == 1


def test_objects_written_under_git_are_no_change_but_a_commit_is(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    for part in ("objects/ab", "refs/heads", "refs/remotes/origin", "logs"):
        (fleet / ".git" / part).mkdir(parents=True)
    (fleet / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (fleet / ".git" / "refs" / "heads" / "main").write_text("1" * 40 + "\n")
    before = eff.signature(fleet)
    (fleet / ".git" / "objects" / "ab" / "cdef").write_bytes(b"x" * 100)  # a fetch, a gc
    (fleet / ".git" / "refs" / "remotes" / "origin" / "main").write_text("2" * 40 + "\n")
    (fleet / ".git" / "logs" / "HEAD").write_text("...\n")
    assert eff.signature(fleet) == before
    (fleet / ".git" / "refs" / "heads" / "main").write_text("3" * 40 + "\n")  # a commit
    assert eff.signature(fleet) != before


def test_a_read_that_fails_while_the_files_move_is_made_again(tmp_path: Path, monkeypatch) -> None:
    """A file cut mid-line does not validate: when the files moved during that read, its INVALID_INPUT is not
    the answer; the read is made again once they are still."""
    fleet = _fleet(tmp_path)
    real = eff._effective
    reads: list[str] = []

    def cut_mid_line(directory, host, facts, state, labels):  # type: ignore[no-untyped-def]
        reads.append(state)
        if len(reads) == 1:
            (fleet / "web.yaml").write_text(WHOLE)  # the write that ends the cut file
            raise Problem.one("INVALID_INPUT", "web.yaml: mapping values are not allowed here")
        return real(directory, host, facts, state, labels)

    monkeypatch.setattr(eff, "_effective", cut_mid_line)
    assert _files_in(eff.effective(fleet, "web1", {})) == ["File[/etc/motd]", "File[/etc/issue]"]
    assert len(reads) == 2


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

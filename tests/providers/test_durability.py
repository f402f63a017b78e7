"""A pass's file writes: renames made durable once per directory, before anything else acts and
before the pass returns; a created file's diff as difflib writes it; what verify trusts."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from datum.core.vocab import Action, ResourceState
from datum.host.executor import run_pass
from datum.host.manifest import parse_manifest
from datum.providers import fs
from datum.providers.base import run
from datum.providers.file import PROVIDER as FILE
from datum.providers.file.spec import FileSpec


@pytest.fixture
def fsyncs(monkeypatch):
    """Every path ``os.fsync`` was asked to sync, by a recording wrapper around the real call
    (power loss, which the syncs are for, is what the machine cannot have)."""
    synced: list[str] = []
    real = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    return synced


def test_a_deferred_write_syncs_its_directory_once_in_sync_dirs(tmp_path, fsyncs):
    for name in ("a", "b", "c"):
        fs.write_atomic(tmp_path / "d" / name, b"x\n", sync_dir=False)
    assert str(tmp_path / "d") not in fsyncs  # each file was synced, its directory not yet
    assert len(fsyncs) == 3
    fs.sync_dirs()
    assert fsyncs.count(str(tmp_path / "d")) == 1
    fs.sync_dirs()  # nothing left to do
    assert fsyncs.count(str(tmp_path / "d")) == 1
    fs.write_atomic(tmp_path / "d" / "e", b"x\n")  # the default: the directory at once
    assert fsyncs.count(str(tmp_path / "d")) == 2


def test_a_pass_makes_its_renames_durable_before_a_command_runs_and_before_it_returns(ctx, tmp_path):
    seen: list[set[str]] = []

    def recording_runner(*args, **kwargs):
        seen.append(set(fs._unsynced))  # what still waits for its directory's fsync
        return run(*args, **kwargs)

    ctx.runner = recording_runner
    manifest = parse_manifest(
        "resources:\n"
        "  - File[/etc/a.conf]:\n      content: \"a\\n\"\n"
        "  - File[/srv/b.conf]:\n      content: \"b\\n\"\n"
        "  - Exec[touch]:\n      command: touch \"$DATUM_ROOT/ran\"\n"
        "      creates: /ran\n      requires: [File[/etc/a.conf], File[/srv/b.conf]]\n",
        tmp_path,
    )
    outcomes = run_pass(manifest, ctx)
    assert [o.state for o in outcomes] == [ResourceState.CONVERGED] * 3
    assert seen and seen[0] == set()  # the Exec ran after both directories were synced
    assert not fs._unsynced
    assert (ctx.root / "ran").exists()


def test_what_a_lost_rename_leaves_is_repaired_by_the_next_pass(ctx, tmp_path):
    """A power loss between a rename and its directory's fsync may leave the old file and the
    temporary one beside it: the next pass writes the content again and removes the leftover."""
    (ctx.root / "etc").mkdir()
    (ctx.root / "etc" / "app.conf").write_text("old\n")
    leftover = ctx.root / "etc" / f"{fs.TMP_PREFIX}0123456789ab"
    leftover.write_text("new\n")
    manifest = parse_manifest('resources:\n  - File[/etc/app.conf]:\n      content: "new\\n"\n', tmp_path)
    (outcome,) = run_pass(manifest, ctx)
    assert (outcome.action, outcome.state) == (Action.UPDATE, ResourceState.CONVERGED)
    assert sorted(os.listdir(ctx.root / "etc")) == ["app.conf"]
    assert (ctx.root / "etc" / "app.conf").read_text() == "new\n"


@pytest.mark.parametrize(
    "after",
    [b"", b"one\n", b"one", b"one\ntwo\n", b"a\n\nb", b"x\n" * 600, ("y" * 200 + "\n").encode() * 400],
)
def test_a_created_files_diff_is_what_difflib_writes(after):
    expected = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        for line in difflib.unified_diff([], fs.split_lines(after.decode()), "/dev/null", "b/etc/x")
    )
    got = fs.unified("/etc/x", None, after)
    if len(after) < 1000:
        assert got == expected
    else:  # long: cut where the general path cuts it
        assert got.startswith(expected[:1000]) and got.endswith(" more lines)\n")
        assert got == _bounded(expected)


def _bounded(full: str) -> str:
    lines = full.splitlines(keepends=True)
    out, chars = [], 0
    for n, line in enumerate(lines):
        if n >= fs.DIFF_MAX_LINES or chars + len(line) > fs.DIFF_MAX_CHARS:
            out.append(f"(diff truncated: {len(lines) - n} more lines)\n")
            break
        out.append(line)
        chars += len(line)
    return "".join(out)


def test_verify_trusts_a_written_file_and_observes_a_mode_change_again(ctx):
    spec = FileSpec(path="/etc/app.conf", content="x\n", mode="0644")
    want = FILE.desired("x", spec, ctx)
    change = FILE.plan(want, FILE.observe(want, ctx))
    FILE.apply(want, FILE.observe(want, ctx), change, ctx)
    assert change.action is Action.CREATE
    target = Path(want.where)
    target.chmod(0o600)  # what nobody could have done between write_atomic and verify
    assert FILE.verify(want, change, ctx) is None  # its bytes and mode were written, fsynced, renamed
    meta = FILE.plan(want, FILE.observe(want, ctx))
    assert meta.action is Action.UPDATE and meta.differences == ("mode 0600, want 0644",)
    os.chmod(target, 0o600)
    assert FILE.verify(want, meta, ctx) == "verification failed: mode 0600, want 0644"


def test_observe_reuses_the_lstat_resolving_made_and_only_that_once(ctx):
    (ctx.root / "f").write_text("x")
    real = ctx.real("/f")
    kept = ctx.lstat(real)
    assert kept is not None and kept.st_size == 1
    (ctx.root / "f").write_text("xyz")
    assert ctx.lstat(real).st_size == 3  # used once: the next one is new
    ctx.real("/f")
    ctx.changed()  # something changed on the host: nothing resolved before is kept
    assert ctx.lstat(real).st_size == 3

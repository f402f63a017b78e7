"""The idle pass (``datum.host.idle``): it stores what the engine would, and hands every other pass over.

Each test runs the real ``datum`` on a sandbox root. An idle pass is told from
the engine's by what the process imported (``-X importtime``); its report is
held equal to the one the engine stores for the same host, times aside.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import Host
from .test_pass_costs import _imports, forget_idle

FILES = (
    "resources:\n"
    '  - File[/srv/a.conf]:\n      content: "a = 1\\n"\n      mode: "0644"\n'
    '  - File[/srv/sub/b.conf]:\n      content: "b\\n"\n'
    "  - File[/srv/gone]:\n      ensure: absent\n"
)
ENGINE = {"datum.host.executor", "datum.host.agent", "datum.core.vocab"}
HEAVY = {
    "json", "re", "enum", "signal", "typing", "pathlib", "contextlib", "threading", "dataclasses", "yaml", "pydantic",
    "click",
}


def _run(host: Host, manifest: Path, *extra: str) -> tuple[int, set[str], str]:
    """``datum apply`` as ``host.apply`` runs it (its configuration included), under ``-X importtime``."""
    args = ("apply", str(manifest), "--root", str(host.root), "--state", str(host.state), *extra)
    return _imports(host, *args, env={"DATUM_CONFIG": str(host.config)} if host.config.exists() else None)


def _stored(host: Host) -> dict:
    db = sqlite3.connect(host.state)
    try:
        return json.loads(db.execute("SELECT report FROM agent_reports").fetchone()[0])
    finally:
        db.close()


def _timeless(report: dict) -> dict:
    out = {k: v for k, v in report.items() if k not in ("startedAt", "finishedAt", "durationSeconds")}
    out["resources"] = [{k: v for k, v in r.items() if k != "durationSeconds"} for r in report["resources"]]
    return out


def _idle(imported: set[str]) -> bool:
    return "datum.host.idle" in imported and ENGINE.isdisjoint(imported)


def test_an_unchanged_pass_is_idle_and_stores_what_the_engine_stores(host):
    manifest = host.manifest(FILES)
    assert _run(host, manifest)[0] == 2
    forget_idle(host)
    code, imported, engine_out = _run(host, manifest)  # the engine's unchanged pass, which remembers
    assert code == 0 and not _idle(imported)
    engine = _stored(host)
    code, imported, idle_out = _run(host, manifest)
    assert code == 0 and _idle(imported), imported & ENGINE
    assert HEAVY.isdisjoint(imported), HEAVY & imported
    idle = _stored(host)
    assert _timeless(idle) == _timeless(engine)
    assert idle_out == engine_out and "host state: converged" in idle_out
    assert idle["finishedAt"] > engine["finishedAt"] and idle["startedAt"] <= idle["finishedAt"]
    assert all(isinstance(r["durationSeconds"], float) for r in idle["resources"])
    assert list(idle) == list(engine)  # the same fields in the same order
    status = host.status("--json")
    assert status.code == 0 and status.json["state"] == "converged"


def test_json_output_and_the_lines_match_the_engines(host):
    manifest = host.manifest(FILES)
    host.apply(manifest)
    engine = host.apply(manifest, "--json")
    idle = host.apply(manifest, "--json")
    assert engine.code == idle.code == 0
    assert _timeless(idle.json) == _timeless(engine.json)


@pytest.mark.parametrize(
    "change, code, words",
    [
        (lambda r: (r / "srv/a.conf").write_text("a = 2\n"), 2, "updated"),
        (lambda r: (r / "srv/a.conf").chmod(0o600), 2, "updated"),
        (lambda r: (r / "srv/sub/b.conf").unlink(), 2, "created"),
        (lambda r: (r / "srv/gone").write_text("x"), 2, "deleted"),
        (lambda r: (r / "srv/a.conf").write_text("a = 1\n\n"), 2, "updated"),  # a longer file
    ],
    ids=["content", "mode", "removed", "must-be-absent", "size"],
)
def test_any_difference_hands_the_pass_to_the_engine(host, change, code, words):
    manifest = host.manifest(FILES)
    host.apply(manifest)
    host.apply(manifest)  # converged without a change: its reads are remembered
    assert _idle(_run(host, manifest)[1])
    change(host.root)
    done, imported, out = _run(host, manifest)
    assert done == code and not _idle(imported), out
    assert words in out
    assert (host.root / "srv/a.conf").read_text() == "a = 1\n" and not (host.root / "srv/gone").exists()
    host.apply(manifest)  # converged without a change: remembered again
    assert _idle(_run(host, manifest)[1])


def test_a_link_where_a_file_or_directory_was_is_the_engines_to_judge(host):
    manifest = host.manifest(FILES)
    host.apply(manifest)
    a = host.root / "srv/a.conf"
    a.rename(host.root / "srv/real.conf")
    a.symlink_to("real.conf")  # the same bytes, through a link
    done, imported, out = _run(host, manifest)
    assert not _idle(imported)
    (host.root / "srv/sub").rename(host.root / "srv/sub2")
    (host.root / "srv/sub").symlink_to("sub2")  # a directory above a file is now a link
    done, imported, out = _run(host, manifest)
    assert not _idle(imported), out


@pytest.mark.parametrize("what", ["manifest", "configuration", "source", "reboot marker", "kernel", "passwd"])
def test_what_the_pass_depended_on_changing_makes_the_engine_run(host, what):
    (host.base / "files").mkdir()
    source = host.base / "files" / "motd"
    source.write_text("hello\n")
    (host.root / "etc").mkdir()
    (host.root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (host.root / "etc/group").write_text("root:x:0:\n")
    host.configure('[host]\nlock_wait = "2s"\n')
    text = FILES + "  - File[/etc/motd]:\n      source: files/motd\n      owner: root\n"
    manifest = host.manifest(text)
    host.apply(manifest)
    time.sleep(1.2)  # past the racy window (file times may be whole seconds): what it read is older
    host.apply(manifest)  # remembered now
    assert _idle(_run(host, manifest)[1])
    if what == "manifest":
        manifest.write_text(text + "# a comment\n")
    elif what == "configuration":
        host.configure('[host]\nlock_wait = "3s"\n')
    elif what == "source":
        source.write_text("changed\n")
    elif what == "reboot marker":
        (host.root / "run").mkdir()
        (host.root / "run/reboot-required").write_text("")
    elif what == "kernel":
        (host.root / "boot").mkdir()
        (host.root / "boot" / "vmlinuz-999.0.0").write_text("")
    elif what == "passwd":
        (host.root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\nweb:x:1000:1000::/:/bin/sh\n")
    code, imported, out = _run(host, manifest, "--json")
    assert not _idle(imported)
    report = json.loads(out)
    if what == "source":
        assert code == 2 and (host.root / "etc/motd").read_text() == "changed\n"
    elif what in ("reboot marker", "kernel"):
        assert report["reboot"]["required"] and report["state"] == "awaiting-reboot", report
    else:
        assert code == 0 and report["state"] == "converged"
    time.sleep(1.2)
    again = [_idle(_run(host, manifest)[1]) for _ in range(2)]
    assert again[-1] is (what not in ("reboot marker", "kernel")), again  # a reboot on record: the engine's


def test_the_lock_is_waited_for_and_a_held_one_refused_as_the_engine_does(host):
    import fcntl

    host.configure('[host]\nlock_wait = "200ms"\n')
    manifest = host.manifest(FILES)
    host.apply(manifest)
    host.apply(manifest)
    assert _idle(_run(host, manifest)[1])
    lock = os.open(f"{host.state}.host-pass.lock", os.O_RDWR)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        code, imported, out = _run(host, manifest)
    finally:
        os.close(lock)
    assert code == 69 and "datum.host.idle" in imported
    assert "datum.host.executor" not in imported  # refused before any pass ran


def test_a_pass_that_died_is_named_by_the_idle_pass_too(host):
    manifest = host.manifest(FILES)
    host.apply(manifest)
    host.apply(manifest)
    record = {"holder": "x", "pid": 4242, "startedAt": "2999-01-01T00:00:00+00:00"}
    Path(f"{host.state}.host-pass.lock").write_text(json.dumps(record))
    done = host.apply(manifest)
    assert done.code == 0
    assert "the pass started at 2999-01-01T00:00:00+00:00 did not finish (pid 4242)" in done.err
    assert Path(f"{host.state}.host-pass.lock").read_text() == ""


def test_a_damaged_entry_is_ignored_and_replaced(host):
    manifest = host.manifest(FILES)
    host.apply(manifest)
    host.apply(manifest)
    [entry] = (host.base / "home").rglob("idle-*.bin")
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600  # it holds the files' bytes: the owner's alone
    data = bytearray(entry.read_bytes())
    data[-5] ^= 0xFF
    entry.write_bytes(bytes(data))
    code, imported, _out = _run(host, manifest)
    assert code == 0 and not _idle(imported)
    assert _idle(_run(host, manifest)[1])


def test_no_entry_for_a_pass_that_did_not_converge_or_ran_a_command(host):
    manifest = host.manifest(FILES)
    host.apply(manifest)
    host.apply(manifest)
    assert list((host.base / "home").rglob("idle-*.bin"))
    (host.root / "srv/a.conf").chmod(0o600)
    host.apply(manifest, "--mode", "observe")  # drifted: the entry of observe passes is not kept
    assert not _idle(_run(host, manifest, "--mode", "observe")[1])
    guarded = host.manifest(FILES + "  - Exec[true]:\n      unless: \"true\"\n", "guarded.yaml")
    host.apply(guarded)
    host.apply(guarded)
    assert not _idle(_run(host, guarded)[1])  # a command's answer is no read a replay can make


def test_templates_and_purges_are_replayed_by_what_they_read(host):
    """A template's facts and files, a purge's listing: read through the recorder, replayed."""
    templated = host.manifest(
        "resources:\n  - File[/srv/t]:\n      template: t.j2\n"
        "  - Directory[/srv]:\n      purge: true\n", "t.yaml")
    (host.base / "t.j2").write_text("{{ kernel }} {{ cpu_count }}\n")
    host.apply(templated)
    host.apply(templated)
    assert _idle(_run(host, templated)[1])
    (host.base / "t.j2").write_text("{{ kernel }}\n")  # the template's bytes
    code, imported, _out = _run(host, templated)
    assert code == 2 and not _idle(imported)
    host.apply(templated)
    assert _idle(_run(host, templated)[1])
    (host.root / "srv/stray").write_text("x")  # the purge's listing
    code, imported, _out = _run(host, templated)
    assert code == 2 and not _idle(imported) and not (host.root / "srv/stray").exists()


def test_a_signal_during_an_idle_pass_stops_it_as_the_engine_would(host, monkeypatch, capsys):
    """SIGTERM during the replay: the engine takes the lock and the signal, runs nothing and
    stores an incomplete report, as for a signal before its first resource."""
    from datum.cli import passes
    from datum.host import idle

    manifest = host.manifest(FILES)
    for name, value in {"DATUM_HOME": str(host.base / "home"), "DATUM_BOOT_ID_FILE": str(host.boot_id)}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("DATUM_CONFIG", raising=False)
    real = idle.reads.unchanged

    def signalled(*args):
        os.kill(os.getpid(), signal.SIGTERM)  # a real signal, to this process, mid-replay
        return real(*args)

    before = signal.getsignal(signal.SIGTERM)
    for _ in range(2):  # converged, then remembered by this process
        passes.apply(str(manifest), root=str(host.root), state=str(host.state))
    assert idle.run(str(manifest), str(host.root), None, str(host.state), None, False) is not None
    monkeypatch.setattr(idle.reads, "unchanged", signalled)
    code = passes.apply(str(manifest), root=str(host.root), state=str(host.state))
    report = _stored(host)
    assert report["incomplete"] is True and report["state"] == "unknown"
    assert code & 4 and "stopped by SIGTERM" in report["reason"]
    assert (host.root / "srv/a.conf").read_text() == "a = 1\n"
    assert signal.getsignal(signal.SIGTERM) is before


def test_directories_that_are_only_present_are_replayed_too(host):
    text = FILES + '  - Directory[/srv/d]:\n      mode: "0750"\n  - Directory[/srv/old]:\n      ensure: absent\n'
    manifest = host.manifest(text)
    assert host.apply(manifest).code == 2
    host.apply(manifest)
    assert _idle(_run(host, manifest)[1])
    (host.root / "srv/d").chmod(0o755)
    code, imported, out = _run(host, manifest)
    assert code == 2 and not _idle(imported) and "Directory[/srv/d]" in out
    assert stat.S_IMODE((host.root / "srv/d").stat().st_mode) == 0o750
    host.apply(manifest)
    (host.root / "srv/old").mkdir()
    code, imported, _out = _run(host, manifest)
    assert code == 2 and not _idle(imported) and not (host.root / "srv/old").exists()
    host.apply(manifest)
    assert _idle(_run(host, manifest)[1])


def test_a_large_file_is_checked_by_its_signature_and_the_entry_stays_small(host):
    manifest = host.manifest(f"resources:\n  - File[/big]:\n      content: \"{'x' * 200_000}\"\n")
    assert host.apply(manifest).code == 2
    host.apply(manifest)
    [entry] = (host.base / "home").rglob("idle-*.bin")
    assert entry.stat().st_size < 50_000 and _idle(_run(host, manifest)[1])
    (host.root / "big").write_text("x" * 199_999 + "y")
    code, imported, _out = _run(host, manifest)
    assert code == 2 and not _idle(imported) and (host.root / "big").read_text() == "x" * 200_000


def test_an_idle_pass_imports_little(host):
    """What an idle pass costs is close to a bare loop: no json, re, typing, pathlib or engine."""
    manifest = host.manifest(FILES)
    host.apply(manifest)
    host.apply(manifest)
    code, imported, _out = _run(host, manifest)
    assert code == 0 and _idle(imported)
    assert HEAVY.isdisjoint(imported), HEAVY & imported
    assert subprocess.run([sys.executable, "-c", "import datum.host.idle"], check=False).returncode == 0


# -- what a review found, each made to fail before its fix ----------------------------------------


def test_another_place_to_find_modules_is_another_datum(host, tmp_path):
    """A directory added to the search path (another Datum, a plugin, a user site) is the engine's."""
    manifest = host.manifest(FILES)
    host.apply(manifest)
    host.apply(manifest)
    assert _idle(_run(host, manifest)[1])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, imported, _out = _imports(host, "apply", str(manifest), "--root", str(host.root), "--state",
                                    str(host.state), env={"PYTHONPATH": str(elsewhere)})
    assert code == 0 and not _idle(imported)


def test_a_link_retargeted_in_the_reboot_places_is_the_engines(host):
    """/boot as a link, pointed at a directory with a newer kernel: the engine sees it."""
    (host.root / "boot-a").mkdir()
    (host.root / "boot-b").mkdir()
    (host.root / "boot-b" / "vmlinuz-999.0.0").write_text("")
    (host.root / "boot").symlink_to("boot-a")
    manifest = host.manifest(FILES)
    host.apply(manifest)
    time.sleep(1.2)
    host.apply(manifest)
    assert _idle(_run(host, manifest)[1])
    (host.root / "boot").unlink()
    (host.root / "boot").symlink_to("boot-b")
    code, imported, out = _run(host, manifest, "--json")
    assert not _idle(imported) and json.loads(out)["state"] == "awaiting-reboot"


def test_a_reboot_marker_present_keeps_every_pass_the_engines(host):
    """Even one the engine found stale (seen before the boot it runs in), even behind a link."""
    (host.root / "run").mkdir()
    (host.root / "run" / "m1").write_text("")
    (host.root / "run" / "reboot-required").symlink_to("m1")
    manifest = host.manifest(FILES)
    host.apply(manifest)
    host.reboot("boot-2")
    time.sleep(1.2)
    for _ in range(3):
        code, imported, _out = _run(host, manifest)
        assert not _idle(imported)


def test_a_file_changed_within_the_racy_window_is_not_trusted(host):
    (host.root / "etc").mkdir()
    (host.root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    text = FILES + "  - File[/etc/motd]:\n      content: hi\n      owner: root\n"
    manifest = host.manifest(text)
    host.apply(manifest)
    host.apply(manifest)  # /etc/passwd changed under a second ago: its bytes are compared on replay
    assert _idle(_run(host, manifest)[1])
    passwd = host.root / "etc/passwd"
    before = passwd.stat()
    passwd.write_text("root:x:0:0:root:/root:/bin/bash")  # another owner line, the same size
    os.utime(passwd, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert not _idle(_run(host, manifest)[1])


def test_names_that_spell_a_slot_are_only_names(host):
    """A title or host name with NULs and digits (what the report's slots once were) stays itself."""
    host.configure('[host]\nname = "\\u00001\\u0000"\n')
    manifest = host.manifest(
        'resources:\n  - "File[\\x004\\x00]":\n      path: /srv/x\n      content: "x"\n'
        '  - "File[\\x0099\\x00]":\n      path: /srv/y\n      content: "y"\n'
    )
    assert host.apply(manifest).code == 2
    engine = host.apply(manifest, "--json")
    idle = host.apply(manifest, "--json")
    assert engine.code == idle.code == 0, idle.err
    assert _idle(_run(host, manifest)[1])
    assert [r["name"] for r in idle.json["resources"]] == ["\x004\x00", "\x0099\x00"]
    assert idle.json["host"] == "\x001\x00" and _timeless(idle.json) == _timeless(engine.json)


def test_a_root_gone_gives_the_lock_back_without_a_record(host):
    manifest = host.manifest(FILES)
    host.apply(manifest)
    host.apply(manifest)
    host.root.rename(host.base / "moved")
    done = host.apply(manifest)
    assert done.code == 65 and "is not a directory" in done.err
    assert Path(f"{host.state}.host-pass.lock").read_text() == ""
    status = host.status("--json")
    assert status.json["state"] == "converged" and "did not finish" not in status.out


def test_secret_bytes_are_kept_only_as_digests(host):
    (host.base / "files").mkdir()
    (host.base / "files" / "key").write_text("TOPSECRET-SOURCE\n")
    manifest = host.manifest(
        FILES + "  - File[/srv/key]:\n      source: files/key\n      mode: \"0600\"\n"
        "  - File[/srv/token]:\n      content: TOPSECRET-INLINE\n      sensitive: true\n"
    )
    host.apply(manifest)
    time.sleep(1.2)
    host.apply(manifest)
    [entry] = (host.base / "home").rglob("idle-*.bin")
    data = entry.read_bytes()
    assert b"TOPSECRET" not in data and b"a = 1" not in data  # the bytes read: their digests alone
    assert _idle(_run(host, manifest)[1])
    (host.root / "srv/key").write_text("TOPSECRET-SOURCX\n")  # one byte, the same size
    code, imported, _out = _run(host, manifest)
    assert code == 2 and not _idle(imported)


def test_idle_entries_are_pruned_with_the_validated_manifests(tmp_path):
    from datum.host.compiled import _MAX_ENTRIES, prune

    for n in range(_MAX_ENTRIES + 6):
        entry = tmp_path / f"idle-{n:040x}.bin"
        entry.write_bytes(b"x")
        os.utime(entry, ns=(n * 10**9, n * 10**9))
    prune(tmp_path)
    left = sorted(p.name for p in tmp_path.glob("idle-*.bin"))
    assert len(left) == _MAX_ENTRIES and left[0] == f"idle-{6:040x}.bin"


def test_a_file_absent_under_a_directory_that_is_not_there_is_idle(host):
    manifest = host.manifest(FILES + "  - File[/nowhere/deeper/x]:\n      ensure: absent\n")
    host.apply(manifest)
    host.apply(manifest)
    assert _idle(_run(host, manifest)[1])
    (host.root / "nowhere").mkdir()
    assert not _idle(_run(host, manifest)[1])  # what the entry saw absent is there now


def test_a_manifest_that_includes_others_is_cached_and_idle_until_one_changes(host):
    """The included files are remembered by the digest of the bytes their validation read: an
    unchanged composition is idle (no YAML read), an edited included file is validated again."""
    (host.base / "roles").mkdir()
    role = host.base / "roles" / "web.yaml"
    role.write_text('resources:\n  - File[/srv/role.conf]:\n      content: "v1\\n"\n')
    manifest = host.manifest("include: [roles/web.yaml]\n" + FILES)
    assert host.apply(manifest).code == 2
    host.apply(manifest)
    code, imported, _out = _run(host, manifest)
    assert code == 0 and _idle(imported) and "yaml" not in imported
    role.write_text('resources:\n  - File[/srv/role.conf]:\n      content: "v2\\n"\n')
    code, imported, _out = _run(host, manifest)
    assert code == 2 and not _idle(imported) and "yaml" in imported
    assert (host.root / "srv/role.conf").read_text() == "v2\n"
    code, imported, _out = _run(host, manifest)  # validated again, remembered, and the cache used
    assert code == 0 and "yaml" not in imported


def test_the_word_include_in_a_path_no_longer_skips_the_caches(host):
    manifest = host.manifest('resources:\n  - File[/usr/include/x.h]:\n      content: "x\\n"\n')
    host.apply(manifest)
    host.apply(manifest)
    code, imported, _out = _run(host, manifest)
    assert code == 0 and _idle(imported)


def test_caches_a_power_cut_emptied_or_zeroed_are_misses(host, monkeypatch):
    """The caches are written without fsync (``write_atomic(durable=False)``): what a power cut can
    leave of them (an empty or zero-filled file) is a miss, never a wrong answer."""
    from datum.providers import fs

    synced = []
    real = os.fsync
    monkeypatch.setattr(fs.os, "fsync", lambda fd: synced.append(fd) or real(fd))
    fs.write_atomic(str(host.base / "entry"), b"x", mode=0o600, durable=False)
    assert synced == [] and (host.base / "entry").read_bytes() == b"x"
    manifest = host.manifest(FILES)
    host.apply(manifest)
    host.apply(manifest)
    entries = [p for p in (host.base / "home").rglob("*") if p.name.startswith("idle-") or p.suffix == ".json"]
    assert any(p.name.startswith("idle-") for p in entries)
    for damage in (b"", b"\0" * 4096):
        for entry in entries:
            entry.write_bytes(damage)
        code, imported, out = _run(host, manifest)
        assert code == 0 and not _idle(imported) and "host state: converged" in out
        assert "yaml" in imported  # the validated manifest was a miss too: validated again

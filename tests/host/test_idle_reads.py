"""The idle pass replays the engine's reads (``datum.providers.reads``): the cases a hand-kept list
missed, and the engine read through nothing else (an audit hook over every open and listing)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from .conftest import Host
from .test_idle import _idle, _run

ACCOUNTS = "root:x:0:0:root:/root:/bin/sh\nalice:x:1001:1001::/home/alice:/bin/sh\n"


def _settled(host: Host, manifest: Path) -> None:
    host.apply(manifest)
    host.apply(manifest)  # converged without a change: its reads remembered
    assert _idle(_run(host, manifest)[1])


def test_an_owner_changed_behind_an_absolute_link_to_etc_is_the_engines(host):
    """Issue 20: /etc -> /realetc (absolute, inside the root); alice's uid changed in /realetc/passwd."""
    real = host.root / "realetc"
    real.mkdir()
    (real / "passwd").write_text(ACCOUNTS)
    (real / "group").write_text("root:x:0:\nalice:x:1001:\n")
    (host.root / "etc").symlink_to("/realetc")
    manifest = host.manifest('resources:\n  - File[/srv/a]:\n      content: "a\\n"\n      owner: alice\n')
    if os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    _settled(host, manifest)
    (real / "passwd").write_text(ACCOUNTS.replace("1001:1001", "1002:1001"))
    code, imported, out = _run(host, manifest)
    assert code == 2 and not _idle(imported) and "updated" in out
    assert (host.root / "srv/a").stat().st_uid == 1002


def test_a_new_reboot_marker_behind_an_absolute_link_to_var_is_the_engines(host):
    """Issue 20: /var -> /realvar (absolute), a new /var/run/reboot-required: awaiting a reboot."""
    (host.root / "realvar" / "run").mkdir(parents=True)
    (host.root / "var").symlink_to("/realvar")
    manifest = host.manifest('resources:\n  - File[/srv/a]:\n      content: "a\\n"\n')
    _settled(host, manifest)
    (host.root / "realvar" / "run" / "reboot-required").write_text("")
    code, imported, out = _run(host, manifest, "--json")
    assert code == 16 and not _idle(imported) and json.loads(out)["state"] == "awaiting-reboot"


EVERY = (
    "resources:\n"
    "  - Group[staff]:\n      gid: 1500\n"
    "  - User[alice]:\n      uid: 1501\n      group: staff\n"
    '  - File[/srv/inline]:\n      content: "a\\n"\n      mode: "0644"\n'
    "  - File[/srv/source]:\n      source: files/motd\n"
    "  - File[/srv/templated]:\n      template: t.j2\n"
    "  - File[/srv/gone]:\n      ensure: absent\n"
    "  - Directory[/srv/purged]:\n      purge: true\n"
    "  - File[/srv/purged/kept]:\n      content: k\n"
    '  - Directory[/srv/tree]:\n      recurse: true\n      mode: "0750"\n'
    "  - Symlink[/srv/link]:\n      target: /srv/inline\n"
    "  - Line[inline.d]:\n      path: /srv/inline.d\n      line: x = 1\n      create: true\n"
    "  - Exec[touch $DATUM_ROOT/srv/made]:\n      creates: /srv/made\n"
)


def test_the_engine_reads_the_host_through_the_recorder_alone(host, monkeypatch):
    """Every open, listing and stat under the root or the manifest's directory during an engine
    pass over every resource type a root can hold (Package and Service ask dpkg and systemd:
    commands, never replayed) is made by ``datum.providers.reads``."""
    from datum.core.vocab import Mode
    from datum.host import agent
    from datum.host.compiled import prepare
    from datum.providers import reads

    (host.base / "files").mkdir()
    (host.base / "files" / "motd").write_text("hello\n")
    (host.base / "t.j2").write_text("{{ kernel }} {{ hostname }} {{ memory_mb }}\n")
    (host.root / "etc").mkdir()
    (host.root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (host.root / "etc/group").write_text("root:x:0:\n")
    (host.root / "srv/tree/sub").mkdir(parents=True)
    (host.root / "srv/tree/sub/f").write_text("x")
    manifest = host.manifest(EVERY)
    monkeypatch.setenv("DATUM_HOME", str(host.base / "home"))
    monkeypatch.setenv("DATUM_BOOT_ID_FILE", str(host.boot_id))
    monkeypatch.delenv("DATUM_CONFIG", raising=False)
    config, loaded, _data = prepare(str(manifest), None)

    def engine() -> agent.PassResult:
        return agent.host_pass(loaded, root=agent.real_root(str(host.root)), mode=Mode.ENFORCE, config=config,
                         state_path=str(host.state))

    engine()
    assert engine().report["state"] == "converged"  # nothing left to change: the pass the idle pass replays
    watched = (str(host.root) + "/", str(host.base / "files"), str(host.base / "t.j2"), "/proc", "/sys", "/etc",
               "/run", "/var", "/boot", str(host.boot_id))
    outside: list[str] = []

    def note(path: object) -> None:
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        own = f"/proc/{os.getpid()}/"  # the pass lock's record of its holder: the state file's, not the host's
        if isinstance(path, str) and path.startswith(watched) and not path.startswith(own) and not reads.reading():
            outside.append(path)

    def hook(event: str, args: tuple) -> None:
        if event in ("open", "os.listdir", "os.scandir") and args:
            note(args[0])

    sys.addaudithook(hook)  # never removed: it does nothing once the test's list is gone
    for name in ("stat", "lstat"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda p, *a, _real=real, **k: (note(p), _real(p, *a, **k))[1])
    record = reads.start()
    try:
        result = engine()
    finally:
        reads.stop()
        monkeypatch.undo()
        watched = ("\0",)
    assert result.report["state"] == "converged", result.report
    assert outside == [], sorted(set(outside))[:10]
    assert not record.opaque
    kinds = {kind for kind, _path, _value in record.reads()}
    assert {"bytes", "stat", "kind", "list", "tree", "fact"} <= kinds, kinds
    assert reads.unchanged(record.reads(), record.started)
    (host.root / "srv/tree/sub/f").chmod(0o600)
    assert not reads.unchanged(record.reads(), record.started)


def test_a_link_handed_to_another_user_is_the_engines_a_file_beside_it_is_not(host):
    """Issue 35: the link rule's reads are the owner and mode of the link and its directory, not
    the directory's times: a file made in /etc keeps the pass idle; the link given to uid 1001
    hands the pass to the engine, which refuses to follow it."""
    if os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    (host.root / "run" / "resolve").mkdir(parents=True)
    (host.root / "etc").mkdir()
    (host.root / "etc" / "resolv.conf").symlink_to("../run/resolve/stub.conf")
    manifest = host.manifest('resources:\n  - File[/etc/resolv.conf]:\n      content: "ns\\n"\n')
    _settled(host, manifest)
    (host.root / "etc" / "unrelated").write_text("x")
    code, imported, _out = _run(host, manifest)
    assert code == 0 and _idle(imported)
    os.lchown(host.root / "etc" / "resolv.conf", 1001, 1001)
    code, imported, out = _run(host, manifest)
    assert code & 4 and not _idle(imported) and "(the link rule)" in out

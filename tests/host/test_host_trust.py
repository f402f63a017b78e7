"""``datum apply``, ``plan`` and ``status`` in-process on a temporary --root: nothing destroyed unasked.

The root itself, a symlinked --root, purge against every path a manifest
touches (aliases included), special files at managed paths, plan against
apply, and content diffs that are never shown nor stored.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest


class Sandbox:
    def __init__(self, base: Path, cli) -> None:
        self.base = base
        self.root = base / "root"
        self.root.mkdir()
        self.state = base / "state.db"
        self.cli = cli

    def manifest(self, text: str) -> str:
        path = self.base / "manifest.yaml"
        path.write_text(text)
        return str(path)

    def run(self, *args: str, root: Path | None = None) -> tuple[int, str]:
        code, out, err = self.cli(*args, "--root", str(root or self.root))
        return code, out + err

    def apply(self, manifest: str, *more: str, root: Path | None = None) -> tuple[int, str]:
        return self.run("apply", manifest, "--state", str(self.state), *more, root=root)

    def plan(self, manifest: str, *more: str) -> tuple[int, str]:
        return self.run("plan", manifest, *more)

    def status_json(self, code: int = 0) -> str:
        """``datum status --json``; it exits with the bits of the host's state (``code``)."""
        done, out, _err = self.cli("status", "--state", str(self.state), "--json")
        assert done == code, (done, out)
        return out


@pytest.fixture
def box(tmp_path, datum_cli, monkeypatch):
    monkeypatch.setenv("DATUM_BOOT_ID_FILE", str(tmp_path / "boot_id"))
    (tmp_path / "boot_id").write_text("boot-1\n")
    return Sandbox(tmp_path, datum_cli)


def line(out: str, resource_id: str) -> str:
    for text in out.splitlines():
        if text.startswith(resource_id + " "):
            return text[len(resource_id) :].strip()
    raise AssertionError(f"no pass line for {resource_id} in:\n{out}")


def test_directory_root_absent_is_refused_before_anything_is_touched(box):
    (box.root / "keep").write_text("x")
    manifest = box.manifest(
        "resources:\n"
        "  - File[/new]:\n      content: x\n"
        "  - Directory[/]:\n      ensure: absent\n      force: true\n"
    )
    code, out = box.apply(manifest)
    assert code == 65, out
    assert "Directory[/]" in out and "is the root" in out
    assert (box.root / "keep").exists() and not (box.root / "new").exists()


def test_a_symlinked_root_is_resolved_once_and_every_write_stays_under_it(box, tmp_path):
    real = box.root
    (real / "run").mkdir()
    (real / "etc").mkdir()
    # An absolute link naming the root by its real path: inside, once the root is its real path.
    (real / "etc" / "alias").symlink_to(real / "run")
    link = tmp_path / "root-link"
    link.symlink_to(real)
    manifest = box.manifest(
        "resources:\n"
        "  - File[/etc/alias/app.pid]:\n      content: '1'\n"
        "  - Directory[/etc]:\n      mode: '0755'\n"
    )
    code, out = box.apply(manifest, root=link)
    assert code == 2, out
    assert (real / "run" / "app.pid").read_text() == "1"
    assert os.readlink(link) == str(real)  # the --root link itself is never replaced
    assert box.apply(manifest, root=link)[0] == 0


def test_purge_keeps_every_path_the_manifest_touches_by_real_path(box):
    r = box.root
    (r / "run").mkdir()
    (r / "var").mkdir()
    (r / "var" / "run").symlink_to("/run")  # the alias of Debian
    (r / "run" / "stale.pid").write_text("9")
    www = r / "srv" / "www"
    www.mkdir(parents=True)
    (www / "junk.html").write_text("x")
    (r / "data").mkdir()
    (r / "data" / "precious").write_text("keep me")
    (www / "junk-link").symlink_to("/data")  # purged: the link goes, what it names stays
    (www / "junk-dir").mkdir()
    (www / "junk-dir" / "inner").symlink_to("/data")
    (box.base / "page.j2").write_text("{{ hostname }}\n")
    manifest = box.manifest(
        """
resources:
  - File[/var/run/app.pid]:
      content: "1"
  - Directory[/run]:
      purge: true
      requires: [File[/var/run/app.pid]]
  - Line[/srv/www/hosts]:
      path: /srv/www/hosts
      line: "127.0.0.1 web"
      create: true
  - Exec[make]:
      command: touch "$DATUM_ROOT/srv/www/made"
      creates: /srv/www/made
  - Symlink[/srv/www/current]:
      target: /data
  - File[/srv/www/page.html]:
      template: page.j2
  - Directory[/srv/www]:
      purge: true
      force: true
      requires: [Line[/srv/www/hosts], Exec[make], Symlink[/srv/www/current], File[/srv/www/page.html]]
"""
    )
    code, out = box.apply(manifest)
    assert code == 2, out
    assert sorted(os.listdir(r / "run")) == ["app.pid"]  # kept through the /var/run alias
    assert os.readlink(r / "var" / "run") == "/run"
    assert sorted(os.listdir(www)) == ["current", "hosts", "made", "page.html"]
    assert (r / "data" / "precious").read_text() == "keep me"
    code, out = box.apply(manifest)
    assert code == 0, out


@pytest.mark.parametrize("what", ["fifo", "socket", "character device"])
def test_a_special_file_at_a_managed_path_fails_with_a_reason(host, what):
    import socket

    (host.root / "etc").mkdir()
    thing = host.root / "etc" / "thing"
    if what == "fifo":
        os.mkfifo(thing)
    elif what == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(thing))
        s.close()
    else:
        os.mknod(thing, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    manifest = host.manifest(
        "resources:\n"
        "  - Line[/etc/thing]:\n      path: /etc/thing\n      line: x\n"
        "  - File[/etc/other]:\n      content: x\n"
    )
    # A real process with a deadline: opening a FIFO for read would block it for ever.
    planned = host.datum("plan", str(manifest), "--root", str(host.root), timeout=30)
    applied = host.datum(
        "apply", str(manifest), "--root", str(host.root), "--state", str(host.state), timeout=30
    )
    for done in (planned, applied):
        assert done.code & 4, done.out + done.err
        assert done.line("Line[/etc/thing]").startswith(f"failed: /etc/thing is a {what}")
    assert (host.root / "etc/other").read_text() == "x"  # the rest of the pass went on
    assert not stat.S_ISREG(os.lstat(thing).st_mode)


def test_plan_says_failed_where_apply_would_refuse(box):
    (box.root / "etc" / "app.conf").mkdir(parents=True)
    manifest = box.manifest("resources:\n  - File[/etc/app.conf]:\n      content: x\n")
    planned = box.plan(manifest)
    applied = box.apply(manifest)
    why = "failed: /etc/app.conf is a directory; refusing to replace it with a file"
    assert (planned[0], line(planned[1], "File[/etc/app.conf]")) == (4, why)
    assert (applied[0], line(applied[1], "File[/etc/app.conf]")) == (4, why)


def test_plan_shows_the_restart_apply_would_do(box):
    manifest = box.manifest(
        """
resources:
  - File[/etc/app.conf]:
      content: "port=80\\n"
  - Exec[reload]:
      command: touch "$DATUM_ROOT/reloaded"
      refreshonly: true
      subscribes: [File[/etc/app.conf]]
"""
    )
    code, out = box.plan(manifest)
    assert code == 8, out
    assert line(out, "Exec[reload]") == "drifted: would restart File[/etc/app.conf] would change"
    code, out = box.apply(manifest)
    assert code == 2, out
    assert line(out, "Exec[reload]") == "restarted"
    assert (box.root / "reloaded").exists()
    code, out = box.plan(manifest)
    assert (code, line(out, "Exec[reload]")) == (0, "converged")


@pytest.mark.parametrize(
    ("attrs", "marker"),
    [
        ('mode: "0600"', "(diff redacted: file is not world-readable)"),
        ("sensitive: true", "(diff redacted: sensitive: true)"),
    ],
)
def test_content_diffs_are_redacted_everywhere(box, attrs, marker):
    (box.root / "etc").mkdir()
    secret = box.root / "etc" / "db.conf"
    secret.write_text("password=hunter2\n")
    secret.chmod(0o600 if "0600" in attrs else 0o644)
    manifest = box.manifest(
        f"resources:\n  - File[/etc/db.conf]:\n      content: \"password=swordfish\\n\"\n      {attrs}\n"
    )
    code, out = box.plan(manifest)
    assert code == 8 and marker in out, out
    code, out = box.plan(manifest, "--json")
    (resource,) = json.loads(out)["resources"]
    assert resource["diff"] == marker + "\n" and resource["sensitive"] is True
    code, out = box.apply(manifest, "--mode", "observe", "--json")
    assert json.loads(out)["resources"][0]["diff"] == marker + "\n"
    status = box.status_json(code=8)  # drifted (observe mode)
    assert json.loads(status)["resources"][0]["diff"] == marker + "\n"
    assert json.loads(status)["resources"][0]["sensitive"] is True
    code, out = box.apply(manifest, "--json")
    assert code == 2
    for text in (out, status, box.status_json()):
        assert "hunter2" not in text and "swordfish" not in text
    assert secret.read_text() == "password=swordfish\n"

"""Private by default (issue 21, item 1): what Datum writes that holds desired or observed content
is its owner's alone (files 0600, directories 0700), whatever the umask says.

Here with umask 000 under a temporary root; tests/realhost/test_private.py does it on a booted
Debian under the shipped unit, read by an unprivileged user.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def umask(value: int):
    before = os.umask(value)
    try:
        yield
    finally:
        os.umask(before)


def modes(top: Path) -> dict[str, int]:
    """Every path under ``top`` (itself included) -> its permission bits."""
    out = {top.name: stat.S_IMODE(top.lstat().st_mode)}
    for path in top.rglob("*"):
        out[str(path.relative_to(top.parent))] = stat.S_IMODE(path.lstat().st_mode)
    return out


def test_the_state_file_and_its_lock_are_the_owners_alone_whatever_the_umask(host):
    manifest = host.manifest('resources:\n  - File[/etc/secret]:\n      content: "s3cret\\n"\n      sensitive: true\n')
    with umask(0):
        run = host.apply(manifest)  # the child inherits umask 000
    assert run.code == 2, run.out + run.err
    written = [p for p in host.base.iterdir() if p.name.startswith("state.db")]
    assert {p.name for p in written} >= {"state.db", "state.db.host-pass.lock"}
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in written if p.is_file()} == {
        p.name: 0o600 for p in written if p.is_file()
    }


def test_a_state_file_an_older_version_left_readable_is_narrowed(host):
    manifest = host.manifest("resources: []\n")
    assert host.apply(manifest).code == 0
    os.chmod(host.state, 0o644)
    assert host.apply(manifest).code == 0
    assert stat.S_IMODE(host.state.stat().st_mode) == 0o600


def test_a_served_manifest_and_its_files_are_the_owners_alone_whatever_the_umask(tmp_path):
    from datum.agent.fetch import materialize

    base = tmp_path / "state.db.manifest"
    served = {
        "digest": "sha256:" + "2" * 64,
        "manifest": {"resources": [{"File[/x]": {"source": "files/x.conf"}}]},
        "files": {"files/x.conf": base64.b64encode(b"secret\n").decode()},
    }
    with umask(0):
        materialize(json.dumps(served).encode(), base)
    found = modes(base)
    assert found, found
    assert {p: m for p, m in found.items() if m not in (0o700, 0o600)} == {}
    assert found["state.db.manifest/sha256-" + "2" * 64 + "/manifest.json"] == 0o600

"""A hostile host for the root-safety tests: a temporary root where an ordinary user owns parts of it.

``Hostile`` runs passes as root over a temporary root whose ``/srv/app`` the unprivileged
uid ``APP`` (1001, ``app`` in the root's passwd) owns, beside a sticky world-writable
``/tmp``, and does what that user could do, as that user: a forked process with its uid and
gids, acting through a directory descriptor opened before it dropped root (the kernel's own
permission checks apply, the sticky bit's included). ``run`` runs one pass in this process
with code run between each resource's observe and its apply
(``datum.host.executor.between_observe_and_apply``). ``snapshot`` records every path of the
root (kind, mode, owner, link target, content digest) so a test can say that nothing but the
resource's own path changed.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from datum.core.vocab import Mode
from datum.host import executor
from datum.host.manifest import parse_manifest
from datum.providers.base import HostContext

APP = 1001
PASSWD = "root:x:0:0:root:/root:/bin/bash\napp:x:1001:1001:app:/srv/app:/bin/sh\n"
GROUP = "root:x:0:\nsudo:x:27:\napp:x:1001:\n"
SHADOW = "root:$6$secret$hash:19000:0:99999:7:::\napp:!:19000:0:99999:7:::\n"
SUDOERS = "root ALL=(ALL:ALL) ALL\n"


class Hostile:
    """A root of its own under ``base``: etc (root's, with passwd, group, shadow, sudoers),
    srv/app (app's, 0755), tmp (1777)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "root"
        etc = self.root / "etc"
        etc.mkdir(parents=True)
        for name, text, mode in (
            ("passwd", PASSWD, 0o644),
            ("group", GROUP, 0o644),
            ("shadow", SHADOW, 0o640),
            ("sudoers", SUDOERS, 0o440),
        ):
            (etc / name).write_text(text)
            os.chmod(etc / name, mode)
        app = self.root / "srv" / "app"
        app.mkdir(parents=True)
        os.chown(app, APP, APP)
        tmp = self.root / "tmp"
        tmp.mkdir()
        os.chmod(tmp, 0o1777)

    def path(self, host_path: str) -> Path:
        return self.root / host_path.lstrip("/")

    def as_app(self, directory: str, act: Callable[[int], Any]) -> None:
        """``act(fd)`` run as APP in a forked process, ``fd`` the host directory ``directory``
        opened while still root (APP cannot search the test's own temporary directories)."""
        fd = os.open(self.path(directory), os.O_RDONLY | os.O_DIRECTORY)
        try:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                code = 1
                try:
                    os.setgroups([])
                    os.setresgid(APP, APP, APP)
                    os.setresuid(APP, APP, APP)
                    act(fd)
                    code = 0
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, f"APP's act in {directory} failed"
        finally:
            os.close(fd)

    def link(self, host_path: str, target: str) -> None:
        """APP makes ``host_path`` a link to ``target`` (whatever is there first is moved aside)."""
        directory, name = os.path.split(host_path)

        def act(fd: int) -> None:
            try:
                os.rename(name, name + ".moved", src_dir_fd=fd, dst_dir_fd=fd)
            except FileNotFoundError:
                pass
            os.symlink(target, name, dir_fd=fd)

        self.as_app(directory, act)

    def write(self, host_path: str, text: str) -> None:
        """APP writes a file of its own at ``host_path``."""
        directory, name = os.path.split(host_path)

        def act(fd: int) -> None:
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fd)
            os.write(out, text.encode())
            os.close(out)

        self.as_app(directory, act)

    def run(
        self, text: str, between: Callable[[Any], None] | None = None, mode: Mode = Mode.ENFORCE
    ) -> dict[str, Any]:
        """One pass of the manifest ``text`` as root; ``between(resource)`` between each
        resource's observe and its apply. The outcomes by resource id."""
        manifest = parse_manifest(text, self.base)
        ctx = HostContext(root=self.root, manifest_dir=self.base, mode=mode)
        with injected(between):
            outcomes = executor.run_pass(manifest, ctx)
        return {o.id: o for o in outcomes}

    def snapshot(self, *, leave: tuple[str, ...] = ()) -> dict[str, tuple[Any, ...]]:
        """Every path under the root but those under ``leave`` (host paths): kind, mode, owner,
        link target, content digest."""
        skip = tuple(str(self.path(p)) for p in leave)
        out: dict[str, tuple[Any, ...]] = {}
        for where in _every(self.root):
            if where.startswith(skip):
                continue
            st = os.lstat(where)
            body: str | None = None
            if stat.S_ISLNK(st.st_mode):
                body = os.readlink(where)
            elif stat.S_ISREG(st.st_mode):
                body = hashlib.sha256(Path(where).read_bytes()).hexdigest()
            out[where[len(str(self.root)) :]] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, body)
        return out


def _every(top: Path) -> Iterator[str]:
    yield str(top)
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            yield os.path.join(dirpath, name)


@contextmanager
def injected(between: Callable[[Any], None] | None) -> Iterator[None]:
    """``between`` as the executor's fault-injection hook for the block."""
    before = executor.between_observe_and_apply
    executor.between_observe_and_apply = between
    try:
        yield
    finally:
        executor.between_observe_and_apply = before

"""User and Group edit the account databases as shadow-utils does (issue 35, item 3).

They take the locks useradd takes (glibc's ``lckpwdf`` on etc/.pwd.lock and commonio's
``<file>.lock`` links), read the databases again under them, write gshadow, group, shadow and
passwd in that order, and ``User ensure: absent`` takes the name out of every group as userdel
does. The real ``useradd`` and ``userdel`` (``--prefix``) run on the same kind of root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from datum.core.vocab import Action
from datum.providers import accounts
from datum.providers.base import ProviderError
from datum.providers.group import PROVIDER as GROUP
from datum.providers.group.spec import GroupSpec
from datum.providers.user import PROVIDER as USER
from datum.providers.user.spec import UserSpec
from providers.test_accounts import etc, seed, step

DATABASES = ("passwd", "group", "shadow", "gshadow")

# A process holding the fcntl write lock over the whole of a file, as glibc's lckpwdf takes it,
# for argv[2] seconds: it prints "ready" once it holds it.
HOLD_FCNTL = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("ready", flush=True)
time.sleep(float(sys.argv[2]))
"""

# The real glibc lckpwdf on the root's etc (bind-mounted on /etc in a mount namespace of its own).
HOLD_LCKPWDF = """
import ctypes, sys, time
assert ctypes.CDLL(None).lckpwdf() == 0
print("ready", flush=True)
time.sleep(float(sys.argv[1]))
"""


@pytest.fixture
def short_wait(monkeypatch):
    """A held lock fails the apply after 1 s instead of 15."""
    monkeypatch.setattr(accounts, "LOCK_WAIT", 1.0, raising=False)


def databases(ctx) -> dict[str, bytes]:
    return {name: (ctx.root / "etc" / name).read_bytes() for name in DATABASES}


def links(ctx) -> list[str]:
    """The per-file locks (``<database>.lock``) and their ``<database>.<pid>`` files in the root."""
    return sorted(p.name for p in (ctx.root / "etc").iterdir()
                  if "." in p.name and p.name.partition(".")[0] in DATABASES)


@contextmanager
def holding(*argv: str) -> Iterator[int]:
    """The pid of a process started with ``argv`` that has printed "ready" (it holds its lock),
    killed when the block ends."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def pwd_lock_held(ctx, seconds: float = 30) -> AbstractContextManager[int]:
    """The root's etc/.pwd.lock held by another process, as lckpwdf holds it."""
    return holding(sys.executable, "-c", HOLD_FCNTL, str(ctx.root / "etc/.pwd.lock"), str(seconds))


@contextmanager
def link_lock_held(ctx, database: str) -> Iterator[int]:
    """``<database>.lock`` of a process that runs (its pid is yielded)."""
    with holding("sh", "-c", "echo ready; exec sleep 30") as pid:
        link_lock(ctx, database, pid)
        yield pid


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def link_lock(ctx, database: str, pid: int) -> Path:
    """A ``<database>.lock`` as commonio leaves it: ``<database>.<pid>`` holding the pid, linked."""
    lock = ctx.root / "etc" / f"{database}.lock"
    mine = ctx.root / "etc" / f"{database}.{pid}"
    mine.write_bytes(f"{pid}\0".encode())
    os.link(mine, lock)
    mine.unlink()
    return lock


def create_web(ctx):
    return step(USER, UserSpec(name="web"), ctx)


def test_a_held_pwd_lock_makes_the_apply_wait_then_fail_naming_it_with_nothing_written(ctx, short_wait):
    seed(ctx)
    before = databases(ctx)
    with pwd_lock_held(ctx) as pid, pytest.raises(ProviderError) as caught:
        started = time.monotonic()
        create_web(ctx)
    waited = time.monotonic() - started
    message = str(caught.value)
    assert f"{ctx.root}/etc/.pwd.lock is held by pid {pid}:" in message, message
    assert "nothing was written" in message
    from datum.core.explain import lookup

    assert [e.name for e in lookup(f"User[web] failed: {message}") if e.vocabulary.value == "refusal"] == [
        "accounts_locked"
    ]
    assert 0.9 <= waited < 5, waited
    assert databases(ctx) == before
    assert links(ctx) == []  # Datum's own went with the failure


def test_a_pwd_lock_let_go_within_the_wait_lets_the_apply_proceed(ctx, short_wait):
    seed(ctx)
    with pwd_lock_held(ctx, 0.4):
        started = time.monotonic()
        change, unconfirmed = create_web(ctx)
        waited = time.monotonic() - started
    assert change.action is Action.CREATE and unconfirmed is None
    assert waited >= 0.3, waited  # it waited for the holder
    assert "web:x:1001:1001::/home/web:/bin/sh" in etc(ctx, "passwd")


def _unshare_works() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs root and a mount namespace (unshare -m)")
def test_glibcs_own_lckpwdf_on_the_root_is_seen(ctx, short_wait):
    """The real lckpwdf (ctypes, glibc) with the root's etc bind-mounted on /etc: Datum's lock is
    the same fcntl lock, not an flock that would pass beside it."""
    seed(ctx)
    before = databases(ctx)
    script = 'mount --bind "$1" /etc && exec "$2" -c "$3" 30'
    glibc = holding("unshare", "-m", "sh", "-c", script, "sh", str(ctx.root / "etc"), sys.executable,
                    HOLD_LCKPWDF)
    with glibc as pid, pytest.raises(ProviderError, match=rf"\.pwd\.lock is held by pid {pid}:"):
        create_web(ctx)
    assert databases(ctx) == before


def test_a_passwd_lock_of_a_live_process_fails_the_apply_naming_it_and_its_pid(ctx, short_wait):
    seed(ctx)
    before = databases(ctx)
    with link_lock_held(ctx, "passwd") as pid, pytest.raises(ProviderError) as caught:
        create_web(ctx)
    message = str(caught.value)
    assert f"{ctx.root}/etc/passwd.lock is held by pid {pid}:" in message, message
    assert databases(ctx) == before
    lock = ctx.root / "etc/passwd.lock"
    assert lock.read_bytes() == f"{pid}\0".encode()  # another's lock is never removed
    assert links(ctx) == ["passwd.lock"]


def test_a_stale_passwd_lock_of_a_dead_pid_is_removed_and_the_apply_proceeds(ctx, short_wait):
    seed(ctx)
    link_lock(ctx, "passwd", dead_pid())
    change, unconfirmed = create_web(ctx)
    assert change.action is Action.CREATE and unconfirmed is None
    assert "web:x:1001:1001::/home/web:/bin/sh" in etc(ctx, "passwd")
    left = sorted(p.name for p in (ctx.root / "etc").iterdir() if p.name.startswith(DATABASES))
    assert left == ["group", "group-", "gshadow", "gshadow-", "passwd", "passwd-", "shadow", "shadow-"]


def test_the_lock_is_the_one_shadow_utils_takes_and_it_goes_when_the_edit_ends(ctx):
    seed(ctx)
    pid = os.getpid()
    with accounts.locked(ctx) as edit:
        for name in DATABASES:
            lock = ctx.root / "etc" / f"{name}.lock"
            assert lock.read_bytes() == f"{pid}\0".encode()
            assert lock.stat().st_nlink == 1  # its <file>.<pid> link is gone
        assert (ctx.root / "etc/.pwd.lock").stat().st_mode & 0o777 == 0o600
        probe = subprocess.run(
            [sys.executable, "-c",
             "import fcntl, os, sys; fcntl.lockf(os.open(sys.argv[1], os.O_WRONLY), "
             "fcntl.LOCK_EX | fcntl.LOCK_NB)", str(ctx.root / "etc/.pwd.lock")],
            capture_output=True, check=False,
        )
        assert probe.returncode != 0  # lckpwdf is held
        assert edit.table(accounts.PASSWD).get("alice") is not None
    assert links(ctx) == []


def test_an_account_useradd_adds_after_observe_is_kept_and_its_uid_not_reused(ctx):
    seed(ctx)
    (ctx.root / "etc/login.defs").write_text("USERGROUPS_ENAB yes\n")
    want = USER.desired("web", UserSpec(name="web"), ctx)
    have = USER.observe(want, ctx)  # the pass's cache now holds the tables without bob
    change = USER.plan(want, have)
    subprocess.run(["useradd", "--prefix", str(ctx.root), "bob"], check=True, capture_output=True)
    assert any(line.startswith("bob:x:1001:1001:") for line in etc(ctx, "passwd"))
    USER.apply(want, have, change, ctx)
    passwd = etc(ctx, "passwd")
    assert any(line.startswith("bob:x:1001:1001:") for line in passwd), passwd
    assert "web:x:1002:1002::/home/web:/bin/sh" in passwd
    assert "bob:x:1001:" in etc(ctx, "group") and "web:x:1002:" in etc(ctx, "group")
    assert any(line.startswith("bob:") for line in etc(ctx, "shadow"))
    assert any(line.startswith("bob:") for line in etc(ctx, "gshadow"))
    assert USER.verify(want, change, ctx) is None  # the pass's cache was dropped: it sees the write


ALICE = {
    "passwd": "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\n"
              "bob:x:1001:1001::/home/bob:/bin/sh\n",
    "group": "root:x:0:\nalice:x:1000:\nbob:x:1001:\nadm:x:4:alice,bob\nsudo:x:27:alice\n",
    "shadow": "root:*:19000:0:99999:7:::\nalice:!:19000:0:99999:7:::\nbob:!:19000:0:99999:7:::\n",
    "gshadow": "root:*::\nalice:!::\nbob:!::\nadm:*:alice:alice,bob\nsudo:*:bob,alice:alice\n",
    "login.defs": "USERGROUPS_ENAB yes\n",
}
# alice's group has another member: userdel keeps it, so does Datum.
SHARED = {**ALICE, "group": ALICE["group"].replace("alice:x:1000:", "alice:x:1000:bob")}
# A group named alice that is not alice's primary group: kept.
NOT_PRIMARY = {**ALICE, "passwd": ALICE["passwd"].replace("alice:x:1000:1000:", "alice:x:1000:27:")}


def lay(root: Path, files: dict[str, str]) -> None:
    (root / "etc").mkdir(parents=True)
    for name, text in files.items():
        (root / "etc" / name).write_text(text)
        if "shadow" in name:
            (root / "etc" / name).chmod(0o640)


@pytest.mark.parametrize(
    ("files", "difference"),
    [
        (ALICE, "present, want absent; member of adm, sudo; its group alice goes too"),
        (SHARED, "present, want absent; member of adm, sudo"),
        (NOT_PRIMARY, "present, want absent; member of adm, sudo"),
    ],
    ids=["private-group", "group-shared", "group-not-primary"],
)
def test_user_absent_does_what_userdel_does(ctx, tmp_path, files, difference):
    lay(ctx.root, files)
    lay(tmp_path / "userdel", files)
    change, unconfirmed = step(USER, UserSpec(name="alice", ensure="absent"), ctx)
    assert change.action is Action.DELETE and unconfirmed is None
    assert change.differences == (difference,)
    subprocess.run(["userdel", "--prefix", str(tmp_path / "userdel"), "alice"], check=True, capture_output=True)
    for name in DATABASES:
        theirs = (tmp_path / "userdel/etc" / name).read_text()
        assert (ctx.root / "etc" / name).read_text() == theirs, name
        assert (ctx.root / "etc" / f"{name}-").read_text() == files[name]  # commonio's backup
    assert "adm:*::bob" in etc(ctx, "gshadow") and "sudo:*:bob:" in etc(ctx, "gshadow")


def test_user_absent_takes_out_the_memberships_an_earlier_removal_left(ctx):
    """The previous code removed the passwd and shadow rows only: the name stayed in sudo."""
    lay(ctx.root, {**ALICE, "passwd": ALICE["passwd"].replace("alice:x:1000:1000::/home/alice:/bin/sh\n", ""),
                   "shadow": ALICE["shadow"].replace("alice:!:19000:0:99999:7:::\n", "")})
    change, unconfirmed = step(USER, UserSpec(name="alice", ensure="absent"), ctx)
    assert change.differences == ("absent from /etc/passwd; still member of adm, sudo",)
    assert unconfirmed is None
    assert "adm:x:4:bob" in etc(ctx, "group") and "sudo:x:27:" in etc(ctx, "group")
    assert "adm:*::bob" in etc(ctx, "gshadow") and "sudo:*:bob:" in etc(ctx, "gshadow")
    assert "alice:x:1000:" in etc(ctx, "group")  # without its passwd row, no group is known to be its own
    assert step(USER, UserSpec(name="alice", ensure="absent"), ctx)[0].action is Action.NONE


def recorded_writes(monkeypatch, fail: str | None = None) -> list[str]:
    """The databases accounts writes, in order (backups left out); ``fail`` raises at that one."""
    written: list[str] = []
    real = accounts.write_at

    def write(fd, name, data, **kw):
        if name == fail:
            raise OSError(28, "No space left on device", name)
        if not name.endswith("-"):
            written.append(name)
        real(fd, name, data, **kw)

    monkeypatch.setattr(accounts, "write_at", write)
    return written


def test_passwd_is_written_last_so_a_new_user_never_lacks_its_shadow_row(ctx, monkeypatch):
    seed(ctx)
    written = recorded_writes(monkeypatch)
    create_web(ctx)
    assert written == ["gshadow", "group", "shadow", "passwd"]
    written.clear()
    step(USER, UserSpec(name="web", ensure="absent"), ctx)
    assert written == ["gshadow", "group", "shadow", "passwd"]


def test_a_removal_cut_before_passwd_is_finished_by_the_next_pass(ctx, monkeypatch):
    lay(ctx.root, ALICE)
    recorded_writes(monkeypatch, fail="passwd")
    with pytest.raises(OSError):
        step(USER, UserSpec(name="alice", ensure="absent"), ctx)
    ctx.changed()
    assert "alice" not in (ctx.root / "etc/group").read_text().replace("alice:x:1000:", "")
    monkeypatch.undo()
    change, unconfirmed = step(USER, UserSpec(name="alice", ensure="absent"), ctx)
    assert change.action is Action.DELETE and unconfirmed is None
    assert not any(line.startswith("alice:") for line in etc(ctx, "passwd") + etc(ctx, "shadow"))
    assert links(ctx) == []


def test_group_edits_take_the_group_locks(ctx, short_wait):
    seed(ctx)
    before = databases(ctx)
    www = GroupSpec(name="www", members=["alice"])
    with link_lock_held(ctx, "gshadow") as pid:
        with pytest.raises(ProviderError, match=rf"gshadow\.lock is held by pid {pid}:"):
            step(GROUP, www, ctx)
        os.unlink(ctx.root / "etc/gshadow.lock")
    assert databases(ctx) == before
    with pwd_lock_held(ctx) as pid, pytest.raises(ProviderError, match=rf"\.pwd\.lock is held by pid {pid}:"):
        step(GROUP, www, ctx)
    assert databases(ctx) == before
    assert step(GROUP, www, ctx)[0].action is Action.CREATE
    assert "www:x:1001:alice" in etc(ctx, "group")


def test_a_membership_edit_keeps_the_gshadow_administrators(ctx):
    seed(ctx)
    (ctx.root / "etc/gshadow").write_text("root:*::\nadm:*:alice:\n")
    step(GROUP, GroupSpec(name="adm", members=["alice"]), ctx)
    assert "adm:*:alice:alice" in etc(ctx, "gshadow")

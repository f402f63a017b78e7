"""What every provider is: resolve desired (I/O), observe (I/O), plan (pure), apply (I/O), verify.

No pydantic here: a pass whose manifest was validated before runs without it
(see ``datum.host.compiled``); the attribute models live in ``specs``.

A provider also says whether it supports this host at all; a resource no
provider supports is ``skipped`` with that reason, never attempted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from datum.core.vocab import Action, Mode
from datum.providers.value import Frozen, Value

if TYPE_CHECKING:  # keeps the facts module (and subprocess) out of idle passes
    import subprocess

    from datum.providers.facts import Facts


class ProviderError(Exception):
    """A provider could not observe or apply; the message is what the pass line says."""


# --- the host a pass runs against ------------------------------------------------------------


class Completed(Value):
    """A finished command: its argv, exit status and output."""

    __slots__ = ("argv", "returncode", "stdout", "stderr", "timed_out")
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool  # killed at its timeout (status 124), not an answer of its own

    def __init__(
        self, argv: tuple[str, ...], returncode: int, stdout: str, stderr: str, timed_out: bool = False
    ) -> None:
        self.argv = argv
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.timed_out = timed_out

    def why(self, name: str | None = None) -> str:
        """The failure as one line: ``NAME exited N: <tail>`` (``tail``); NAME is the program's."""
        tail = self.tail()
        return f"{name or self.argv[0]} exited {self.returncode}" + (f": {tail}" if tail else "")

    def tail(self) -> str:
        """The lines that explain a failure, as one line joined by `` | ``: the last lines of its
        standard error, then (room left) of its output before them, blank lines dropped; at most
        ``TAIL_LINES`` lines of ``TAIL_LINE_CHARS`` each. Anything shaped like a Datum token is
        redacted. The same text reaches the pass line, the report, the store and the page."""
        from datum.core.redact import redacted

        def lines(text: str) -> list[str]:
            return [line.strip() for line in text.splitlines() if line.strip()]

        picked = lines(self.stderr)[-TAIL_LINES:]
        room = TAIL_LINES - len(picked)
        if room:
            picked = lines(self.stdout)[-room:] + picked
        shown = [line if len(line) <= TAIL_LINE_CHARS else line[: TAIL_LINE_CHARS - 3] + "..." for line in picked]
        return redacted(" | ".join(shown))


# A failed command's message keeps this much of its output (``Completed.tail``).
TAIL_LINES = 10
TAIL_LINE_CHARS = 300


Runner = Callable[..., Completed]


def run(
    argv: Sequence[str],
    *,
    input: str | None = None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = 600,
    shell: bool = False,
) -> Completed:
    """Run a command and capture its output; a missing program is exit status 127.

    The command runs in a session (and process group) of its own. On timeout
    the whole group is killed, grandchildren included, and the status is 124.
    """
    import subprocess

    try:
        proc = subprocess.Popen(
            list(argv) if not shell else argv[0],
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=env,
            shell=shell,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        return Completed(tuple(argv), 127, "", str(exc))
    try:
        stdout, stderr = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        why = f"timed out after {timeout:g}s; its processes were killed"
        return Completed(tuple(argv), 124, "", why, timed_out=True)
    except BaseException:
        _kill_group(proc)
        raise
    return Completed(tuple(argv), proc.returncode, stdout, stderr)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the command's process group, then reap it (pipes held by escapees are let go)."""
    import signal
    import subprocess

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:  # a process that left the group still holds the pipes
        proc.kill()
        proc.wait()


class HostContext(Value):
    """Everything a provider may know about the host of this pass; nothing global."""

    __slots__ = (
        "root", "mode", "manifest_dir", "boot_id_file", "managed_paths", "manifest", "runner",
        "systemd", "cache", "_facts", "_kept", "_stat",
    )  # fmt: skip
    root: Path
    mode: Mode
    manifest_dir: Path
    boot_id_file: str
    # Host paths that some resource of the manifest manages (a Directory purge keeps them).
    managed_paths: frozenset[str]
    # The manifest of this pass, when a pass runs: a Directory purge keeps every path it touches.
    manifest: Any
    runner: Runner
    # Whether systemd runs as PID 1; None asks the running system.
    systemd: bool | None
    cache: dict[str, Any]
    _facts: Facts | None
    _kept: frozenset[str] | None
    _stat: tuple[str, os.stat_result] | None  # (path, lstat) of the last ``real()``

    def __init__(
        self,
        root: Path,
        mode: Mode = Mode.ENFORCE,
        manifest_dir: Path | None = None,
        boot_id_file: str = "/proc/sys/kernel/random/boot_id",
        managed_paths: frozenset[str] = frozenset(),
        manifest: Any = None,
        runner: Runner | None = None,
        systemd: bool | None = None,
        cache: dict[str, Any] | None = None,
        _facts: Facts | None = None,
        _kept: frozenset[str] | None = None,
        _stat: tuple[str, os.stat_result] | None = None,
    ) -> None:
        self.root = root
        self.mode = mode
        self.manifest_dir = Path.cwd() if manifest_dir is None else manifest_dir
        self.boot_id_file = boot_id_file
        self.managed_paths = managed_paths
        self.manifest = manifest
        self.runner = run if runner is None else runner
        self.systemd = systemd
        self.cache = {} if cache is None else cache
        self._facts = _facts
        self._kept = _kept
        self._stat = _stat
        from datum.providers.fs import forget_sweeps

        forget_sweeps()  # a new pass sweeps leftover temporary files again

    @property
    def is_real_root(self) -> bool:
        return str(self.root) == "/"

    @property
    def facts(self) -> Facts:
        """The host facts, read on first use only (templates need them, idle passes do not)."""
        if self._facts is None:
            from datum.providers.facts import read_facts

            self._facts = read_facts(self.root, self.boot_id_file)
        return self._facts

    def path(self, host_path: str, *, follow_last: bool = True) -> Path:
        """``host_path`` resolved inside the root; raises ``Escape`` when it would leave it."""
        return Path(self.real(host_path, follow_last=follow_last))

    def real(self, host_path: str, *, follow_last: bool = True) -> str:
        """``path`` as a string; the ``lstat`` it made of the final component is kept for ``lstat``."""
        from datum.providers.fs import real_path

        found: dict[str, os.stat_result] = {}
        real = real_path(
            str(self.root),
            host_path,
            follow_last=follow_last,
            cache=self.cache.get("paths") or self.cache.setdefault("paths", {}),
            stats=found,
        )
        self._stat = (real, found[real]) if found else None
        return real

    def lstat(self, real: str) -> os.stat_result | None:
        """The ``lstat`` of ``real``: the one the last ``real()`` made of it (used once), else a new one."""
        kept, self._stat = self._stat, None
        if kept is not None and kept[0] == real:
            return kept[1]
        from datum.providers.fs import lstat

        return lstat(real)

    def changed(self) -> None:
        """Something on the host changed: forget what was resolved or read before."""
        self.cache.clear()
        self._kept = None
        self._stat = None

    def systemd_running(self) -> bool:
        """Whether systemd is PID 1 here, as sd_booted(3) tells it."""
        if self.systemd is None:
            self.systemd = os.path.isdir("/run/systemd/system")
        return self.systemd


# --- what a provider returns -------------------------------------------------------------------


class Change(Frozen):
    """The plan for one resource: an action and, when there is one, what differs."""

    __slots__ = ("action", "differences", "diff", "sensitive")
    action: Action
    differences: tuple[str, ...]
    diff: str | None
    # The content diff was withheld (a file not world-readable, or sensitive: true).
    sensitive: bool

    def __init__(
        self,
        action: Action = Action.NONE,
        differences: tuple[str, ...] = (),
        diff: str | None = None,
        sensitive: bool = False,
    ) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "action", action)
        setattr_(self, "differences", differences)
        setattr_(self, "diff", diff)
        setattr_(self, "sensitive", sensitive)

    @property
    def summary(self) -> str:
        return ", ".join(self.differences) or self.action.value


NO_CHANGE = Change()

S = TypeVar("S")
W = TypeVar("W")
H = TypeVar("H")


class Provider(Generic[S, W, H]):
    """One resource type on this host. ``W`` is its resolved desired state, ``H`` what it observed."""

    type: ClassVar[str]
    # Its attributes' pydantic model (a ``datum.providers.specs.Spec``), as "module:Class" or
    # the class: imported for validation only, so a pass over a validated manifest never loads it.
    spec: ClassVar[str | type[Any]]
    # The attribute the resource's name fills when the manifest leaves it out
    # (``File[/etc/motd]`` means ``path: /etc/motd``), as Puppet's namevar.
    namevar: ClassVar[str | None] = None
    # Whether a change in a resource it subscribes to makes it act (restart, refresh).
    refreshable: ClassVar[bool] = False
    # Whether its apply leaves directory fsyncs to ``fs.sync_dirs()`` (the executor runs it
    # before applying a resource of any other provider, and at the end of the pass).
    defers_dir_sync: ClassVar[bool] = False

    @classmethod
    def spec_model(cls) -> Any:
        """The model of its attributes (``spec``, imported when it is a name)."""
        spec = cls.spec
        if isinstance(spec, str):
            import importlib

            module, _, attr = spec.partition(":")
            spec = getattr(importlib.import_module(module), attr)
        return spec

    def supported(self, ctx: HostContext) -> str | None:
        """None when this provider can manage resources here, else why not."""
        return None

    def paths(self, spec: S) -> list[str]:
        """The host paths this resource owns (two resources owning one path is a finding)."""
        return []

    def touches(self, spec: S) -> list[str]:
        """The host paths this resource reads or writes, owned or not (a Directory purge keeps them)."""
        found = self.paths(spec)
        creates = getattr(spec, "creates", None)  # Exec: the path its command makes
        return [*found, creates] if isinstance(creates, str) else found

    def desired(self, name: str, spec: S, ctx: HostContext) -> W:
        """The fully resolved desired state (content rendered, paths under root)."""
        raise NotImplementedError

    def observe(self, want: W, ctx: HostContext) -> H:
        raise NotImplementedError

    def plan(self, want: W, have: H) -> Change:
        """Pure: what would make ``have`` match ``want``."""
        raise NotImplementedError

    def refresh(self, want: W, have: H, why: str) -> Change:
        """Pure: the change when something it subscribes to changed and it is otherwise in place."""
        return Change(Action.RESTART, (why,))

    def apply(self, want: W, have: H, change: Change, ctx: HostContext) -> str | None:
        """Make the change; return why it needs a reboot, if it does."""
        raise NotImplementedError

    def probe(self, spec: S, want: W, ctx: HostContext) -> tuple[Any, ...] | None:
        """What the idle pass (``datum.host.idle``) checks to know this resource is still in place
        without the pass engine, or None when it cannot say (then every idle pass runs the engine).

        A probe is plain data (``marshal`` stores it) that ``datum.host.idle.holds`` checks; it must
        never hold where ``plan`` would find a change (tests/host/test_idle.py checks ``File``'s).
        """
        return None

    def verify(self, want: W, change: Change, ctx: HostContext) -> str | None:
        """After apply: None when observing again confirms the result, else what still differs."""
        again = self.plan(want, self.observe(want, ctx))
        return None if again.action is Action.NONE else f"verification failed: {again.summary}"


class PathProvider(Provider[S, W, H]):
    """A provider of a filesystem object at the resource's ``path``."""

    def paths(self, spec: S) -> list[str]:
        return [spec.path]  # type: ignore[attr-defined]

    @staticmethod
    def plain(ctx: HostContext, host_path: str, where: str) -> bool:
        """Whether ``host_path`` resolved to ``where`` through no link (the only paths a probe names:
        the idle pass checks that every directory above one is still a directory)."""
        root = str(ctx.root)
        return where == os.path.normpath(host_path if root == "/" else root + host_path)

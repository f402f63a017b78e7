"""What every provider is: resolve desired (I/O), observe (I/O), plan (pure), apply (I/O), verify.

No pydantic here: a pass whose manifest was validated before runs without it
(see ``datum.host.compiled``). A pass hands every provider its resource's
``Attributes``; the model that validated them (``Provider.spec``) lives beside
the provider (``datum.providers.file.spec``) and is imported to validate only.

A provider also says whether it supports this host at all; a resource no
provider supports is ``skipped`` with that reason, never attempted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from datum.core.packagewords import exited
from datum.core.vocab import Action, Mode
from datum.providers.errors import ProviderError as ProviderError  # raised by every provider

if TYPE_CHECKING:  # keeps the facts module (and subprocess) out of idle passes
    import subprocess

    from datum.providers.facts import Facts


class Attributes(SimpleNamespace):
    """A resource's validated attributes as a pass reads them: read-only, and the same object
    whether validation ran in this process or its result came from the cache (``datum.host.compiled``).

    Its ``repr`` names the attributes without their values: one may be a secret (a password hash).
    It has no methods of its own, so every attribute name is free (``File``'s ``replace``):
    ``vars(attributes)`` is the mapping, ``Attributes(**{**vars(a), name: value})`` a changed copy.
    """

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the attributes of a resource are read-only: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"the attributes of a resource are read-only: cannot delete {name!r}")

    def __repr__(self) -> str:
        return f"Attributes({', '.join(vars(self))})"


@dataclass(frozen=True, slots=True)
class Beside:
    """A file next to the manifest that a resource reads (a ``source``, a ``template``): the
    attribute that names it, its path as written, and whether ``--allow-source-outside`` may
    take it out of the manifest's directory (a template always stays there)."""

    attribute: str
    path: str
    may_leave: bool = True


# --- the host a pass runs against ------------------------------------------------------------


@dataclass(slots=True)
class Completed:
    """A finished command: its argv, exit status and output."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False  # killed at its timeout (status 124), not an answer of its own

    def why(self, name: str | None = None) -> str:
        """The failure as one line: ``NAME exited N: <tail>`` (``tail``); NAME is the program's."""
        tail = self.tail()
        return exited(name or self.argv[0], self.returncode) + (f": {tail}" if tail else "")

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

    from datum.providers.reads import opaque

    opaque(f"ran {argv[0] if argv else 'a command'}")  # a read no replay of the pass can make
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


@dataclass(slots=True)
class HostContext:
    """Everything a provider may know about the host of this pass; nothing global."""

    root: Path
    mode: Mode = Mode.ENFORCE
    manifest_dir: Path = field(default_factory=Path.cwd)
    boot_id_file: str = "/proc/sys/kernel/random/boot_id"
    # Host paths that some resource of the manifest manages (a Directory purge keeps them).
    managed_paths: frozenset[str] = frozenset()
    # The manifest of this pass, when a pass runs: a Directory purge keeps every path it touches.
    manifest: Any = None
    runner: Runner = run
    # Whether systemd runs as PID 1; None asks the running system.
    systemd: bool | None = None
    cache: dict[str, Any] = field(default_factory=dict)
    _facts: Facts | None = None
    _kept: frozenset[str] | None = None
    _marked: dict[str, str] | None = None  # ``hidden``: the manifest's paths whose content is never shown
    _hidden: dict[str, str] | None = None  # ``hidden``: those and their real paths, until a change
    _stat: tuple[str, os.stat_result] | None = None  # (path, lstat) of the last ``real()``

    def __post_init__(self) -> None:
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
        from datum.providers.reads import real_path

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

    def hidden(self, host_path: str, real: str) -> str | None:
        """The marker that stands for any content diff of ``host_path`` (real path ``real``), or None
        when it may be shown: sensitivity belongs to a path, not to a resource. When any resource of
        the manifest at that path, by its host path or its real path, says ``sensitive: true`` or gives
        it a mode others cannot read (``fs.redaction`` decides which marker), no resource's diff, plan,
        report or page shows its content. The marked paths are read from the manifest once a pass;
        only their real paths are resolved again after a change."""
        if self._marked is None:
            from datum.providers.fs import redaction

            marked: dict[str, str] = {}
            for r in getattr(self.manifest, "resources", ()):
                path, mode = getattr(r.spec, "path", None), getattr(r.spec, "mode", None)
                marker = redaction(bool(getattr(r.spec, "sensitive", False)), mode if isinstance(mode, int) else None)
                if isinstance(path, str) and marker is not None and not _says_more(marked.get(path), marker):
                    marked[path] = marker
            self._marked = marked
        if self._hidden is None:
            hidden = dict(self._marked)
            for path, marker in self._marked.items():
                try:
                    where = self.real(path)
                except (ProviderError, OSError):
                    continue
                if not _says_more(hidden.get(where), marker):
                    hidden[where] = marker
            self._hidden = hidden
        return self._hidden.get(host_path) or self._hidden.get(real)

    def parent(self, real: str, host_path: str, *, make: bool = False) -> Any:
        """``(directory descriptor, name)`` of ``real`` for a ``with`` block, reached from the root by
        descriptors without following a link (``datum.providers.held.parent``): where apply acts."""
        from datum.providers.held import parent

        return parent(str(self.root), str(real), host_path, make=make)

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
        self._hidden = None
        self._stat = None

    def systemd_running(self) -> bool:
        """Whether systemd is PID 1 here, as sd_booted(3) tells it."""
        if self.systemd is None:
            from datum.providers.reads import kind

            self.systemd = kind("/run/systemd/system") == 0o040000  # a directory (sd_booted)
        return self.systemd


def _says_more(kept: str | None, marker: str) -> bool:
    """Whether the marker ``kept`` for a path already says more than ``marker`` (``sensitive: true`` says
    more than a mode)."""
    from datum.providers.fs import REDACTED_SENSITIVE

    return kept == REDACTED_SENSITIVE and marker != REDACTED_SENSITIVE


# --- what a provider returns -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    """The plan for one resource: an action and, when there is one, what differs."""

    action: Action = Action.NONE
    differences: tuple[str, ...] = ()
    diff: str | None = None
    # The content diff was withheld (a file not world-readable, or sensitive: true).
    sensitive: bool = False

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
    # Its attributes' pydantic model (a ``datum.providers.spec.Spec``), as "module:Class" or
    # the class: imported for validation only, so a pass over a validated manifest never loads it.
    spec: ClassVar[str | type[Any]]
    # The attribute the resource's name fills when the manifest leaves it out
    # (``File[/etc/motd]`` means ``path: /etc/motd``), as Puppet's namevar.
    namevar: ClassVar[str | None] = None
    # Whether a change in a resource it subscribes to makes it act (restart, refresh).
    refreshable: ClassVar[bool] = False
    # Whether every read it makes of the host goes through ``datum.providers.reads`` (so the idle
    # pass can replay a pass that converged it: ``datum.host.idle``). A provider that reads the host
    # another way (its own files, a service's API) leaves it False: every pass with it runs the engine.
    reads_recorded: ClassVar[bool] = False
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
        return self.paths(spec)

    def beside(self, spec: S) -> list[Beside]:
        """The files next to the manifest this resource reads: validation checks each is there
        (and inside the manifest's directory), and a cached manifest is valid only while they are."""
        return []

    def secret(self, spec: S) -> bool:
        """Whether this resource holds something that is never shown nor kept in the clear (a
        file's ``sensitive`` content, or content read from a ``source``; a password hash)."""
        return False

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

    def batch(self, want: W) -> str | None:
        """The batch ``want``'s change may join, or None to apply it alone. The executor applies the
        changes of one batch walked one after the other (nothing of another type between them) with one
        ``apply_together``: a package manager's one transaction for the packages of a pass."""
        return None

    def apply_together(self, changes: Sequence[tuple[W, H, Change]], ctx: HostContext) -> list[str | Exception | None]:
        """Make two or more changes of one batch at once; for each, in order, why it needs a reboot
        (None: it does not) or the error it failed with. Raising fails them all."""
        raise NotImplementedError

    def verify(self, want: W, change: Change, ctx: HostContext) -> str | None:
        """After apply: None when observing again confirms the result, else what still differs."""
        again = self.plan(want, self.observe(want, ctx))
        return None if again.action is Action.NONE else f"verification failed: {again.summary}"


class PathProvider(Provider[S, W, H]):
    """A provider of a filesystem object at the resource's ``path``."""

    def paths(self, spec: S) -> list[str]:
        return [spec.path]  # type: ignore[attr-defined]

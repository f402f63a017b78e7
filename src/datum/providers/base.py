"""What every provider is: resolve desired (I/O), observe (I/O), plan (pure), apply (I/O), verify.

A provider also says whether it supports this host at all; a resource no
provider supports is ``skipped`` with that reason, never attempted.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Generic, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from datum.core.vocab import Action, Mode

if TYPE_CHECKING:  # keeps the facts module out of idle passes
    from datum.providers.facts import Facts


class ProviderError(Exception):
    """A provider could not observe or apply; the message is what the pass line says."""


# --- attribute types every provider shares ---------------------------------------------------


def _host_path(value: str) -> str:
    if "\x00" in value:
        raise ValueError("a path cannot contain NUL")
    if not value.startswith("/"):
        raise ValueError("must be an absolute path such as /etc/nginx/nginx.conf")
    parts = [p for p in value.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError("must not contain '..': every path resolves inside --root")
    return "/" + "/".join(parts)


HostPath = Annotated[str, AfterValidator(_host_path)]


def _octal_mode(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError("quote the mode as an octal string, e.g. '0644'")
    text = value.strip()
    if not text or len(text) > 5 or any(c not in "01234567" for c in text):
        raise ValueError("an octal mode such as '0644' or '2775'")
    return int(text, 8)


FileMode = Annotated[
    int, BeforeValidator(_octal_mode), WithJsonSchema({"type": "string", "pattern": "^[0-7]{3,5}$"})
]


def _account(value: Any) -> str:
    if isinstance(value, bool):
        raise ValueError("a user or group name, or a numeric id")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("an id is not negative")
        return str(value)
    if not isinstance(value, str) or not value or ":" in value or "\n" in value:
        raise ValueError("a user or group name, or a numeric id")
    return value


Account = Annotated[
    str,
    BeforeValidator(_account),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]}),
]


class Spec(BaseModel):
    """The attributes every resource has; each type extends it with its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The attribute filled from the resource's name when the manifest omits it
    # (``File[/etc/motd]`` means ``path: /etc/motd``), as Puppet's namevar.
    namevar: ClassVar[str | None] = None

    requires: list[str] = Field(default_factory=list, description="Resources this one needs first.")
    subscribes: list[str] = Field(
        default_factory=list,
        description="Resources this one needs first, and is refreshed (restarted) when they change.",
    )


class PathSpec(Spec):
    """A filesystem object at a path, with the mode and ownership conventions of Puppet's ``file``."""

    namevar = "path"

    path: HostPath = Field(description="Absolute path on the host; defaults to the name.")
    ensure: Literal["present", "absent"] = "present"
    mode: FileMode | None = Field(default=None, description="Octal string, e.g. '0644'.")
    owner: Account | None = Field(
        default=None, description="User name or uid, in the root's etc/passwd."
    )
    group: Account | None = Field(
        default=None, description="Group name or gid, in the root's etc/group."
    )


# --- the host a pass runs against ------------------------------------------------------------


@dataclass
class Completed:
    """A finished command: its argv, exit status and output."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def why(self) -> str:
        """The failure as one line: exit status and the last line of stderr."""
        tail = (self.stderr or self.stdout).strip().splitlines()
        return f"{self.argv[0]} exited {self.returncode}" + (f": {tail[-1]}" if tail else "")


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
    """Run a command and capture its output; a missing program is exit status 127."""
    try:
        proc = subprocess.run(
            list(argv) if not shell else argv[0],
            input=input,
            capture_output=True,
            text=True,
            cwd=cwd,
            env=env,
            timeout=timeout,
            shell=shell,
            check=False,
        )
    except FileNotFoundError as exc:
        return Completed(tuple(argv), 127, "", str(exc))
    except subprocess.TimeoutExpired:
        return Completed(tuple(argv), 124, "", f"timed out after {timeout}s")
    return Completed(tuple(argv), proc.returncode, proc.stdout, proc.stderr)


@dataclass
class HostContext:
    """Everything a provider may know about the host of this pass; nothing global."""

    root: Path
    mode: Mode = Mode.ENFORCE
    manifest_dir: Path = field(default_factory=Path.cwd)
    boot_id_file: str = "/proc/sys/kernel/random/boot_id"
    # Host paths that some resource of the manifest manages (a Directory purge keeps them).
    managed_paths: frozenset[str] = frozenset()
    runner: Runner = run
    # Whether systemd runs as PID 1; None asks the running system.
    systemd: bool | None = None
    cache: dict[str, Any] = field(default_factory=dict)
    _facts: Facts | None = None

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
        from datum.providers.fs import resolve

        return resolve(self.root, host_path, follow_last=follow_last, cache=self.cache.setdefault("paths", {}))

    def changed(self) -> None:
        """Something on the host changed: forget what was resolved or read before."""
        self.cache.clear()

    def systemd_running(self) -> bool:
        """Whether systemd is PID 1 here, as sd_booted(3) tells it."""
        if self.systemd is None:
            self.systemd = os.path.isdir("/run/systemd/system")
        return self.systemd


# --- what a provider returns -------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """The plan for one resource: an action and, when there is one, what differs."""

    action: Action = Action.NONE
    differences: tuple[str, ...] = ()
    diff: str | None = None

    @property
    def summary(self) -> str:
        return ", ".join(self.differences) or self.action.value


NO_CHANGE = Change()

S = TypeVar("S", bound=Spec)
W = TypeVar("W")
H = TypeVar("H")


class Provider(Generic[S, W, H]):
    """One resource type on this host. ``W`` is its resolved desired state, ``H`` what it observed."""

    type: ClassVar[str]
    spec: ClassVar[type[Spec]]
    # Whether a change in a resource it subscribes to makes it act (restart, refresh).
    refreshable: ClassVar[bool] = False

    def supported(self, ctx: HostContext) -> str | None:
        """None when this provider can manage resources here, else why not."""
        return None

    def paths(self, spec: S) -> list[str]:
        """The host paths this resource manages (for conflicts and Directory purge)."""
        return []

    def desired(self, name: str, spec: S, ctx: HostContext) -> W:
        """The fully resolved desired state (content rendered, paths under root)."""
        raise NotImplementedError

    def observe(self, want: W, ctx: HostContext) -> H:
        raise NotImplementedError

    def plan(self, want: W, have: H) -> Change:
        """Pure: what would make ``have`` match ``want``."""
        raise NotImplementedError

    def apply(self, want: W, have: H, change: Change, ctx: HostContext) -> str | None:
        """Make the change; return why it needs a reboot, if it does."""
        raise NotImplementedError

    def verify(self, want: W, change: Change, ctx: HostContext) -> str | None:
        """After apply: None when observing again confirms the result, else what still differs."""
        again = self.plan(want, self.observe(want, ctx))
        return None if again.action is Action.NONE else f"verification failed: {again.summary}"

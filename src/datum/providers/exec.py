"""``Exec``: a command, guarded by ``creates`` / ``unless`` / ``onlyif``, or run only on refresh.

Commands run on the running system through ``/bin/sh -c`` (they are not
chrooted: a sandbox root rarely holds a shell), with the working directory
``--root`` by default and ``DATUM_ROOT`` set so a command can address the root
itself; ``creates`` is a path under the root. Datum's own secrets
(``DATUM_TOKEN``) are not passed on. Guard commands run in observe mode too,
so they must not change anything.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from datum.core.vocab import Action
from datum.providers.base import Change, Completed, HostContext, Provider, ProviderError
from datum.providers.value import Frozen

if TYPE_CHECKING:
    from datum.providers.specs import ExecSpec


# The agent's credentials are its own, never a managed command's.
_WITHHELD = frozenset({"DATUM_TOKEN"})


class ExecWant(Frozen):
    __slots__ = ("spec", "creates", "cwd", "env")
    spec: ExecSpec
    creates: Path | None
    cwd: str
    env: dict[str, str]

    def __init__(self, spec: ExecSpec, creates: Path | None, cwd: str, env: dict[str, str]) -> None:
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "creates", creates)
        object.__setattr__(self, "cwd", cwd)
        object.__setattr__(self, "env", env)


class ExecHave(Frozen):
    __slots__ = ("created", "unless_ok", "onlyif_ok")
    created: bool | None  # None: no creates guard
    unless_ok: bool | None
    onlyif_ok: bool | None

    def __init__(
        self, created: bool | None, unless_ok: bool | None, onlyif_ok: bool | None
    ) -> None:
        object.__setattr__(self, "created", created)
        object.__setattr__(self, "unless_ok", unless_ok)
        object.__setattr__(self, "onlyif_ok", onlyif_ok)


def shell(ctx: HostContext, want: ExecWant, command: str) -> Completed:
    """Run ``command``; at ``timeout`` its whole process group is killed (``datum.providers.base.run``)."""
    return ctx.runner(
        ["/bin/sh", "-c", command], cwd=want.cwd, env=want.env, timeout=want.spec.timeout
    )


def guard(ctx: HostContext, want: ExecWant, name: str, command: str) -> bool:
    """Whether a guard command succeeds; one that timed out answered nothing, so nothing runs."""
    done = shell(ctx, want, command)
    if done.timed_out:
        raise ProviderError(f"{name} {done.stderr}")
    return done.returncode == 0


class ExecProvider(Provider["ExecSpec", ExecWant, ExecHave]):
    type = "Exec"
    spec = "datum.providers.specs:ExecSpec"
    namevar = "command"
    refreshable = True

    def desired(self, name: str, spec: ExecSpec, ctx: HostContext) -> ExecWant:
        inherited = {k: v for k, v in os.environ.items() if k not in _WITHHELD}
        env = {**inherited, **spec.environment, "DATUM_ROOT": str(ctx.root)}
        creates = ctx.path(spec.creates) if spec.creates else None
        return ExecWant(spec, creates, str(ctx.path(spec.cwd)) if spec.cwd else str(ctx.root), env)

    def observe(self, want: ExecWant, ctx: HostContext) -> ExecHave:
        s = want.spec
        return ExecHave(
            want.creates.exists() if want.creates else None,
            guard(ctx, want, "unless", s.unless) if s.unless else None,
            guard(ctx, want, "onlyif", s.onlyif) if s.onlyif else None,
        )

    def plan(self, want: ExecWant, have: ExecHave) -> Change:
        if want.spec.refreshonly or have.created or have.unless_ok or have.onlyif_ok is False:
            return Change()
        action = Action.CREATE if want.creates else Action.UPDATE
        why = f"{want.spec.creates} absent" if want.creates else "would run"
        return Change(action, (why,))

    def apply(self, want: ExecWant, have: ExecHave, change: Change, ctx: HostContext) -> str | None:
        done = shell(ctx, want, want.spec.command)
        if done.returncode != 0:
            tail = done.tail()
            raise ProviderError(f"exit status {done.returncode}" + (f": {tail}" if tail else ""))
        return None

    def verify(self, want: ExecWant, change: Change, ctx: HostContext) -> str | None:
        if want.creates is not None and not want.creates.exists():
            return f"verification failed: {want.spec.creates} still absent"
        if want.spec.unless and not guard(ctx, want, "unless", want.spec.unless):
            return "verification failed: unless still fails"
        return None


PROVIDER = ExecProvider()

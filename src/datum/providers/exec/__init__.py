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
from dataclasses import dataclass
from pathlib import Path

from datum.core.vocab import Action
from datum.providers import reads
from datum.providers.base import Attributes, Change, Completed, HostContext, Provider, ProviderError

# The agent's credentials are its own, never a managed command's.
_WITHHELD = frozenset({"DATUM_TOKEN"})


@dataclass(frozen=True, slots=True)
class ExecWant:
    spec: Attributes
    creates: Path | None
    cwd: str
    env: dict[str, str]


@dataclass(frozen=True, slots=True)
class ExecHave:
    created: bool | None  # None: no creates guard
    unless_ok: bool | None
    onlyif_ok: bool | None


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


class ExecProvider(Provider[Attributes, ExecWant, ExecHave]):
    type = "Exec"
    reads_recorded = True  # through datum.providers.reads: the idle pass replays them
    spec = "datum.providers.exec.spec:ExecSpec"
    namevar = "command"
    refreshable = True

    def touches(self, spec: Attributes) -> list[str]:
        return [spec.creates] if spec.creates else []  # the path its command makes

    def desired(self, name: str, spec: Attributes, ctx: HostContext) -> ExecWant:
        inherited = {k: v for k, v in os.environ.items() if k not in _WITHHELD}
        env = {**inherited, **spec.environment, "DATUM_ROOT": str(ctx.root)}
        creates = ctx.path(spec.creates) if spec.creates else None
        return ExecWant(spec, creates, str(ctx.path(spec.cwd)) if spec.cwd else str(ctx.root), env)

    def observe(self, want: ExecWant, ctx: HostContext) -> ExecHave:
        s = want.spec
        return ExecHave(
            reads.kind(str(want.creates)) is not None if want.creates else None,
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
        if want.creates is not None and reads.kind(str(want.creates)) is None:
            return f"verification failed: {want.spec.creates} still absent"
        if want.spec.unless and not guard(ctx, want, "unless", want.spec.unless):
            return "verification failed: unless still fails"
        return None


PROVIDER = ExecProvider()

"""``Service``: a systemd unit running or stopped, enabled or not; restarted when what it subscribes to changes.

Only where systemd is PID 1 and ``--root`` is the running system; anywhere
else the resource is ``skipped`` with the reason, and the host is ``degraded``.
A unit that does not exist is ``failed``, never ``skipped``; one that fails to
start is ``failed`` with the last lines of its journal in the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from datum.core.vocab import Action
from datum.providers.base import Attributes, Change, HostContext, Provider, ProviderError


@dataclass(frozen=True, slots=True)
class SvcWant:
    unit: str
    ensure: str | None
    enable: bool | None


@dataclass(frozen=True, slots=True)
class SvcHave:
    active: str  # systemctl is-active: active, inactive, failed, activating, ...
    enabled: str  # systemctl is-enabled: enabled, disabled, static, masked, not-found, ...


def unit_name(name: str) -> str:
    return name if "." in name.rsplit("@", 1)[-1] else f"{name}.service"


JOURNAL_LINES = 5
# After a start, how long a unit must stay up before the pass believes it (Type=simple
# units are "active" the moment their process is forked).
SETTLE_SECONDS = 0.25


def journal_tail(ctx: HostContext, unit: str) -> str:
    """The unit's last journal lines, joined with `` | `` for a one-line reason; "" when none."""
    done = ctx.runner(
        ["journalctl", "--no-pager", "-q", "-o", "cat", "-n", str(JOURNAL_LINES), f"--unit={unit}"]
    )
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return " | ".join(lines[-JOURNAL_LINES:])


def commands(want: SvcWant, have: SvcHave, action: Action) -> list[list[str]]:
    """Pure: the systemctl command lines that make ``have`` match ``want``."""
    out: list[list[str]] = []
    if want.enable is True and have.enabled != "enabled":
        out.append(["systemctl", "enable", "--", want.unit])
    elif want.enable is False and have.enabled == "enabled":
        out.append(["systemctl", "disable", "--", want.unit])
    running = have.active == "active"
    if want.ensure == "running" and not running:
        out.append(["systemctl", "start", "--", want.unit])
    elif want.ensure == "stopped" and running:
        out.append(["systemctl", "stop", "--", want.unit])
    elif action is Action.RESTART and running:  # a refresh never starts what is meant to be down
        out.append(["systemctl", "restart", "--", want.unit])
    return out


class ServiceProvider(Provider[Attributes, SvcWant, SvcHave]):
    type = "Service"
    spec = "datum.providers.service.spec:ServiceSpec"
    namevar = "name"
    refreshable = True

    def supported(self, ctx: HostContext) -> str | None:
        if not ctx.systemd_running():
            return "systemd is not PID 1"
        if not ctx.is_real_root:
            return f"--root {ctx.root} is not the running system"
        return None

    def desired(self, name: str, spec: Attributes, ctx: HostContext) -> SvcWant:
        return SvcWant(unit_name(spec.name), spec.ensure, spec.enable)

    def observe(self, want: SvcWant, ctx: HostContext) -> SvcHave:
        active = ctx.runner(["systemctl", "is-active", "--", want.unit]).stdout.strip() or "unknown"
        enabled = ctx.runner(["systemctl", "is-enabled", "--", want.unit]).stdout.strip() or "not-found"
        if enabled == "not-found":
            raise ProviderError(f"unit {want.unit} not found")
        return SvcHave(active, enabled)

    def plan(self, want: SvcWant, have: SvcHave) -> Change:
        differences = []
        if want.ensure == "running" and have.active != "active":
            differences.append(f"{have.active}, want running")
        if want.ensure == "stopped" and have.active == "active":
            differences.append("running, want stopped")
        if want.enable is True and have.enabled != "enabled":
            differences.append(f"{have.enabled}, want enabled")
        if want.enable is False and have.enabled == "enabled":
            differences.append("enabled, want disabled")
        return Change(Action.UPDATE, tuple(differences)) if differences else Change()

    def refresh(self, want: SvcWant, have: SvcHave, why: str) -> Change:
        # Only a running unit is restarted; one that is down stays down.
        return Change(Action.RESTART, (why,)) if have.active == "active" else Change()

    def apply(self, want: SvcWant, have: SvcHave, change: Change, ctx: HostContext) -> str | None:
        for argv in commands(want, have, change.action):
            done = ctx.runner(argv)
            if done.returncode != 0:
                why = done.why(" ".join(argv[:2]))
                if argv[1] in ("start", "restart"):
                    tail = journal_tail(ctx, want.unit)
                    why += f"; journal: {tail}" if tail else ""
                raise ProviderError(why)
        return None

    def verify(self, want: SvcWant, change: Change, ctx: HostContext) -> str | None:
        """As the base class, waiting out ``activating``; a unit down after a start adds its journal."""
        import time

        started = change.action is Action.RESTART or any("want running" in d for d in change.differences)
        if started and want.ensure == "running":
            time.sleep(SETTLE_SECONDS)  # a unit that dies at once is failed, not converged
        have = self.observe(want, ctx)
        for _ in range(50):  # up to 5 s for a unit still on its way up or down
            if have.active not in ("activating", "deactivating", "reloading"):
                break
            time.sleep(0.1)
            have = self.observe(want, ctx)
        again = self.plan(want, have)
        if again.action is Action.NONE:
            return None
        why = f"verification failed: {again.summary}"
        if want.ensure == "running" and have.active != "active":
            tail = journal_tail(ctx, want.unit)
            why += f"; journal: {tail}" if tail else ""
        return why


PROVIDER = ServiceProvider()

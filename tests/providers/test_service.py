"""Service: skipped without systemd as PID 1; with it (a named fake), the systemctl command lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from datum.core.vocab import Action
from datum.providers.base import Completed, HostContext
from datum.providers.service import PROVIDER as SERVICE
from datum.providers.service import SvcHave, SvcWant, commands
from datum.providers.service.spec import ServiceSpec


class FakeSystemctl:
    """Stands in for systemd as PID 1: answers is-active / is-enabled and records every command."""

    def __init__(self, active: str = "inactive", enabled: str = "disabled") -> None:
        self.active, self.enabled = active, enabled
        self.calls: list[list[str]] = []

    def __call__(self, argv, **_kw) -> Completed:
        argv = list(argv)
        self.calls.append(argv)
        verb = argv[1]
        answers = {"is-active": self.active, "is-enabled": self.enabled}
        if verb in ("start", "restart"):
            self.active = "active"
        elif verb == "stop":
            self.active = "inactive"
        elif verb == "enable":
            self.enabled = "enabled"
        elif verb == "disable":
            self.enabled = "disabled"
        return Completed(tuple(argv), 0, answers.get(verb, "") + "\n", "")


def test_skipped_where_systemd_is_not_pid_1(tmp_path):
    assert SERVICE.supported(HostContext(root=Path("/"), systemd=False)) == "systemd is not PID 1"


def test_skipped_under_a_sandbox_root(tmp_path):
    assert "is not the running system" in SERVICE.supported(HostContext(root=tmp_path, systemd=True))


def test_supported_on_the_running_system_with_systemd():
    assert SERVICE.supported(HostContext(root=Path("/"), systemd=True)) is None


@pytest.mark.parametrize(
    ("want", "have", "action", "expected"),
    [
        (("running", True), ("inactive", "disabled"), Action.UPDATE,
         [["systemctl", "enable", "--", "nginx.service"], ["systemctl", "start", "--", "nginx.service"]]),
        (("running", None), ("active", "enabled"), Action.NONE, []),
        (("running", None), ("active", "enabled"), Action.RESTART, [["systemctl", "restart", "--", "nginx.service"]]),
        (("stopped", False), ("active", "enabled"), Action.UPDATE,
         [["systemctl", "disable", "--", "nginx.service"], ["systemctl", "stop", "--", "nginx.service"]]),
        (("stopped", None), ("inactive", "enabled"), Action.RESTART, []),  # a stopped service is not restarted
        ((None, None), ("inactive", "enabled"), Action.RESTART, []),  # nor one whose state is not managed
        ((None, None), ("active", "enabled"), Action.RESTART, [["systemctl", "restart", "--", "nginx.service"]]),
        (("running", None), ("failed", "static"), Action.UPDATE, [["systemctl", "start", "--", "nginx.service"]]),
    ],
)
def test_command_lines(want, have, action, expected):
    assert commands(SvcWant("nginx.service", *want), SvcHave(*have), action) == expected


def test_apply_and_verify_through_the_fake():
    fake = FakeSystemctl()
    ctx = HostContext(root=Path("/"), systemd=True, runner=fake)
    spec = ServiceSpec(name="nginx", ensure="running", enable=True)
    want = SERVICE.desired("nginx", spec, ctx)
    have = SERVICE.observe(want, ctx)
    change = SERVICE.plan(want, have)
    assert change.differences == ("inactive, want running", "disabled, want enabled")
    SERVICE.apply(want, have, change, ctx)
    assert SERVICE.verify(want, change, ctx) is None
    assert ["systemctl", "start", "--", "nginx.service"] in fake.calls


def test_unit_names():
    from datum.providers.service import unit_name

    assert [unit_name(n) for n in ("nginx", "getty@tty1", "foo.socket", "a.b@x")] == [
        "nginx.service", "getty@tty1.service", "foo.socket", "a.b@x.service"
    ]


@pytest.mark.parametrize(("active", "action"), [("active", Action.RESTART), ("inactive", Action.NONE)])
def test_refresh_restarts_only_a_running_unit(active, action):
    want = SvcWant("nginx.service", None, None)
    assert SERVICE.refresh(want, SvcHave(active, "enabled"), "File[x] changed").action is action


def test_a_unit_that_looks_like_an_option_is_never_read_as_one():
    """A unit name may begin with ``-`` (systemd's ``-.mount``): after ``--``, systemctl takes it as a unit,
    never as an option (``-H.service`` would have it ssh to a host named ``.service``)."""
    fake = FakeSystemctl()
    want = SERVICE.desired("-H", ServiceSpec(name="-H", ensure="running"), HostContext(root=Path("/"), runner=fake))
    SERVICE.observe(want, HostContext(root=Path("/"), runner=fake))
    assert commands(want, SvcHave("inactive", "disabled"), Action.UPDATE) == [["systemctl", "start", "--", "-H.service"]]
    assert fake.calls == [["systemctl", "is-active", "--", "-H.service"], ["systemctl", "is-enabled", "--", "-H.service"]]

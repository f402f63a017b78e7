"""The executor's batches (``Provider.batch``): the changes of one batch walked one after the other are
applied together, before any resource of another type is observed; one failure of the whole fails each."""

from __future__ import annotations

from pathlib import Path

import pytest

from datum.core.vocab import Action, Mode, ResourceState
from datum.host import executor
from datum.host.model import Manifest, Resource
from datum.providers.base import Attributes, Change, HostContext, Provider, ProviderError


class Packages(Provider[Attributes, str, bool]):
    """A fake package manager: a set of installed names, changed in transactions it records."""

    type = "Pkg"
    spec = dict

    def __init__(self) -> None:
        self.installed: set[str] = set()
        self.transactions: list[list[str]] = []
        self.fail: str | None = None  # the whole transaction fails, saying this
        self.refuse: set[str] = set()  # these alone fail

    def desired(self, name: str, spec: Attributes, ctx: HostContext) -> str:
        return name

    def observe(self, want: str, ctx: HostContext) -> bool:
        return want in self.installed

    def plan(self, want: str, have: bool) -> Change:
        return Change() if have else Change(Action.CREATE, ("not installed",))

    def batch(self, want: str) -> str | None:
        return None if want.startswith("alone-") else "fake"

    def apply(self, want: str, have: bool, change: Change, ctx: HostContext) -> str | None:
        (result,) = self.apply_together([(want, have, change)], ctx)
        if isinstance(result, Exception):
            raise result
        return result

    def apply_together(self, changes, ctx):
        names = [want for want, _have, _change in changes]
        self.transactions.append(names)
        if self.fail:
            raise ProviderError(self.fail)
        self.installed |= set(names) - self.refuse
        return [ProviderError(f"{n} refused") if n in self.refuse else ("reboot: true" if n == "kernel" else None)
                for n in names]


class Watcher(Provider[Attributes, str, frozenset[str]]):
    """Another type: what it observes is what the package manager had installed by then."""

    type = "Watch"
    spec = dict

    def __init__(self, packages: Packages) -> None:
        self.packages = packages
        self.saw: list[frozenset[str]] = []

    def desired(self, name: str, spec: Attributes, ctx: HostContext) -> str:
        return name

    def observe(self, want: str, ctx: HostContext) -> frozenset[str]:
        self.saw.append(frozenset(self.packages.installed))
        return frozenset(self.packages.installed)

    def plan(self, want: str, have: frozenset[str]) -> Change:
        return Change()


@pytest.fixture
def fake(monkeypatch) -> Packages:
    packages = Packages()
    watcher = Watcher(packages)
    monkeypatch.setattr(executor, "provider", {"Pkg": packages, "Watch": watcher}.__getitem__)
    return packages


def manifest(*items: tuple[str, str] | tuple[str, str, list[str]]) -> Manifest:
    resources = tuple(
        Resource(i, item[0], item[1], Attributes(requires=list(item[2]) if len(item) > 2 else [], subscribes=[]))
        for i, item in enumerate(items)
    )
    return Manifest(Path("."), resources, tuple(range(len(resources))))


def test_changes_walked_together_are_one_transaction_and_another_type_sees_them_applied(fake, tmp_path):
    ctx = HostContext(tmp_path)
    fake.installed.add("b")
    walked = manifest(("Pkg", "a"), ("Pkg", "b"), ("Pkg", "kernel", ["Pkg[a]"]), ("Watch", "w"), ("Pkg", "c"),
                      ("Pkg", "d"))
    outcomes = executor.run_pass(walked, ctx)
    assert fake.transactions == [["a", "kernel"], ["c", "d"]]
    assert [(o.id, o.state, o.changed) for o in outcomes] == [
        ("Pkg[a]", ResourceState.CONVERGED, True), ("Pkg[b]", ResourceState.CONVERGED, False),
        ("Pkg[kernel]", ResourceState.CONVERGED, True), ("Watch[w]", ResourceState.CONVERGED, False),
        ("Pkg[c]", ResourceState.CONVERGED, True), ("Pkg[d]", ResourceState.CONVERGED, True),
    ]
    assert executor.provider("Watch").saw == [frozenset({"a", "b", "kernel"})]  # after the first batch, not between
    assert outcomes[2].reboot_required == "reboot: true" and outcomes[0].reason == "not installed"
    assert all(o.duration_seconds > 0 for o in outcomes)


def test_a_change_that_is_applied_alone_applies_the_batch_before_it(fake, tmp_path):
    outcomes = executor.run_pass(manifest(("Pkg", "a"), ("Pkg", "alone-x"), ("Pkg", "b")), HostContext(tmp_path))
    assert fake.transactions == [["a"], ["alone-x"], ["b"]]
    assert {o.state for o in outcomes} == {ResourceState.CONVERGED}


def test_a_failed_transaction_fails_each_of_its_changes_and_blocks_what_needs_them(fake, tmp_path):
    fake.fail = "dnf exited 1: Error: | Problem: nothing provides libx"
    outcomes = executor.run_pass(manifest(("Pkg", "a"), ("Pkg", "b"), ("Watch", "w", ["Pkg[b]"])), HostContext(tmp_path))
    assert [(o.state, o.error) for o in outcomes[:2]] == [(ResourceState.FAILED, fake.fail)] * 2
    assert (outcomes[2].state, outcomes[2].blocked_by) == (ResourceState.BLOCKED, ("Pkg[b]",))
    assert fake.installed == set()


def test_one_change_that_fails_alone_fails_alone(fake, tmp_path):
    fake.refuse = {"b"}
    outcomes = executor.run_pass(manifest(("Pkg", "a"), ("Pkg", "b")), HostContext(tmp_path))
    assert [(o.state, o.error) for o in outcomes] == [(ResourceState.CONVERGED, None), (ResourceState.FAILED, "b refused")]


def test_a_stop_drops_the_batch_not_yet_applied(fake, tmp_path):
    asked = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 2

    outcomes = executor.run_pass(manifest(("Pkg", "a"), ("Pkg", "b"), ("Pkg", "c")), HostContext(tmp_path), stop=stop)
    assert fake.transactions == [] and fake.installed == set()
    assert [(o.state, o.action) for o in outcomes] == [(ResourceState.PENDING, Action.NONE)] * 3


def test_observe_mode_applies_nothing(fake, tmp_path):
    outcomes = executor.run_pass(manifest(("Pkg", "a"), ("Pkg", "b")), HostContext(tmp_path, mode=Mode.OBSERVE))
    assert fake.transactions == [] and [o.state for o in outcomes] == [ResourceState.DRIFTED] * 2


def test_progress_says_pending_then_applying_then_each_outcome(fake, tmp_path):
    seen = []
    executor.run_pass(manifest(("Pkg", "a"), ("Pkg", "b")), HostContext(tmp_path),
                      progress=lambda pos, total, rid, state: seen.append((pos, rid, state.value)))
    assert seen == [(1, "Pkg[a]", "pending"), (2, "Pkg[b]", "pending"), (1, "Pkg[a]", "applying"),
                    (2, "Pkg[b]", "applying"), (1, "Pkg[a]", "converged"), (2, "Pkg[b]", "converged")]

"""The pass's value classes (``datum.providers.value``) behave as the dataclasses they replace did:
made with the same arguments, equal by their fields, frozen ones hashable and unchangeable."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from datum.core.vocab import Action, Mode, RebootPolicy, ResourceState
from datum.host.agent import PassResult
from datum.host.compiled import HostConfig
from datum.host.executor import Outcome
from datum.host.manifest import Manifest as FromManifest
from datum.host.manifest import Resource as FromManifestResource
from datum.host.model import Manifest, Resource
from datum.host.reboot import Decision, Found, Slot
from datum.providers.accounts import Table
from datum.providers.base import Change, Completed, HostContext, run
from datum.providers.exec import ExecHave, ExecWant
from datum.providers.facts import NAMES, Facts
from datum.providers.file import FileHave, FileWant
from datum.providers.group import GroupHave, GroupWant
from datum.providers.line import LineHave, LineWant
from datum.providers.package import PkgHave, PkgWant
from datum.providers.service import SvcHave, SvcWant
from datum.providers.symlink import LinkHave, LinkWant
from datum.providers.user import UserHave, UserWant


def _config(**kw):
    base = dict(name=None, mode=Mode.ENFORCE, reboot_policy=RebootPolicy.NEVER, maintenance_window=None,
                reboot_command="systemctl reboot", state_path="/x.db", boot_id_file="/b",
                lock_wait=timedelta(seconds=1))
    return HostConfig(**{**base, **kw})


FROZEN = [
    (lambda: Change(), lambda: Change(Action.UPDATE, ("mode",))),
    (lambda: FileWant("/a", "/r/a", "present", b"x", 0o644, None, None),
     lambda: FileWant("/a", "/r/a", "present", b"x", 0o600, None, None)),
    (lambda: FileHave("file", b"x", None), lambda: FileHave("file", b"y", None)),
    (lambda: Found(("kernel",), {}), lambda: Found(("kernel",), {}, "6.1")),
    (lambda: Decision(True, "now"), lambda: Decision(False, "now")),
    (lambda: Slot(True, "yes"), lambda: Slot(True, "no")),
    (lambda: Table("/etc/group", (("a", "x", "1"),)), lambda: Table("/etc/group", ())),
    (lambda: _config(), lambda: _config(token="t")),
    (lambda: Resource(0, "File", "/a", SimpleNamespace(requires=[], subscribes=[])),
     lambda: Resource(1, "File", "/a", SimpleNamespace(requires=[], subscribes=[]))),
    (lambda: ExecWant("spec", None, "/r", {"A": "1"}), lambda: ExecWant("spec", None, "/r", {"A": "2"})),
    (lambda: ExecHave(None, True, None), lambda: ExecHave(None, False, None)),
    (lambda: GroupWant("spec"), lambda: GroupWant("other")),
    (lambda: GroupHave(("ops", "x", "2000", "")), lambda: GroupHave(None)),
    (lambda: LineWant("/etc/hosts", Path("/r/etc/hosts"), "spec"), lambda: LineWant("/etc/hosts", Path("/r"), "spec")),
    (lambda: LineHave(b"a\n", 0o644), lambda: LineHave(b"a\n")),
    (lambda: PkgWant("tzdata", "present", None, None, False), lambda: PkgWant("tzdata", "latest", None, None, False)),
    (lambda: PkgHave("1", True, "2"), lambda: PkgHave("1")),
    (lambda: SvcWant("nginx.service", "running", True), lambda: SvcWant("nginx.service", "stopped", True)),
    (lambda: SvcHave("active", "enabled"), lambda: SvcHave("inactive", "enabled")),
    (lambda: LinkWant("/a", Path("/r/a"), "present", "/b"), lambda: LinkWant("/a", Path("/r/a"), "present", "/b", True)),
    (lambda: LinkHave("link", "/b"), lambda: LinkHave("absent", None)),
    (lambda: UserWant("spec", "/home/web", "/bin/sh"), lambda: UserWant("spec", "/home/web", "/bin/bash")),
    (lambda: UserHave(("web", "x", "1"), "web", frozenset({"adm"})), lambda: UserHave(None, None, frozenset())),
]


@pytest.mark.parametrize(("make", "other"), FROZEN)
def test_a_frozen_value_is_equal_by_its_fields_and_cannot_change(make, other):
    one, two = make(), make()
    assert one == two and one != other() and one != object()
    if not isinstance(one, Resource | Found | ExecWant):  # a SimpleNamespace spec or a dict: unhashable, as before
        assert hash(one) == hash(two) and len({one, two, other()}) == 2
    field = type(one).__slots__[0]
    with pytest.raises(AttributeError):
        setattr(one, field, None)
    with pytest.raises(AttributeError):
        delattr(one, field)
    if not isinstance(one, Table):  # a Table's own repr never shows shadow's rows
        assert repr(one).startswith(f"{type(one).__name__}({field}=")
    assert one.as_dict() == {name: getattr(one, name) for name in type(one).__slots__ if name != "id"}


@pytest.mark.parametrize(("make", "other"), FROZEN)
def test_a_frozen_value_copies_and_pickles_as_a_frozen_dataclass_did(make, other):
    import copy
    import pickle

    value = make()
    for copied in (copy.copy(value), copy.deepcopy(value), pickle.loads(pickle.dumps(value))):
        assert copied == value and type(copied) is type(value)
    with pytest.raises(AttributeError):
        copy.copy(value).__setattr__(value.__slots__[0], None)


def test_the_defaults_and_the_copies_are_the_dataclasses():
    assert Change() == Change(Action.NONE, (), None, False) and Change().summary == "none"
    assert Change(Action.CREATE, ("absent",)).replace(diff="d", sensitive=True) == Change(
        Action.CREATE, ("absent",), "d", True
    )
    want = FileWant("/a", "/r/a", "present", b"x", None, None, None)
    assert (want.sensitive, want.validate, want.replace, want.backups, want.real) == (False, None, True, 0,
                                                                                       Path("/r/a"))
    assert FileHave("absent", None, None).rejected is None
    assert _config().report_to is None and _config().to_json()["mode"] == "enforce"
    assert HostConfig.from_json(_config(name="h").to_json()) == _config(name="h")
    resource = Resource(3, "File", "/a", SimpleNamespace(requires=["File[/b]"], subscribes=["Exec[x]"]))
    assert resource.id == "File[/a]" and resource.needs == ["File[/b]", "Exec[x]"]
    manifest = Manifest(Path("/m"), (resource,), (0,))
    assert (manifest.source, manifest.paths, manifest.ordered()) == ("<manifest>", frozenset(), [resource])
    assert FromManifest is Manifest and FromManifestResource is Resource  # still where validation makes them


def test_the_provider_values_keep_their_fields_defaults_and_copies():
    """Exec, Group, Line, Package, Service, Symlink and User: the fields in the dataclasses' order,
    their defaults, ``replace``, and a User's repr that never shows its shadow row."""
    assert ExecWant.__slots__ == ("spec", "creates", "cwd", "env")
    assert ExecHave.__slots__ == ("created", "unless_ok", "onlyif_ok")
    assert LineWant.__slots__ == ("host_path", "real", "spec") and LineHave(None) == LineHave(None, None)
    assert PkgWant.__slots__ == ("name", "ensure", "version", "source", "reboot")
    assert PkgHave("1") == PkgHave("1", False, None) and PkgHave(None, candidate="2").candidate == "2"
    assert SvcWant.__slots__ == ("unit", "ensure", "enable") and SvcHave.__slots__ == ("active", "enabled")
    assert LinkWant("/a", Path("/r/a"), "present", "/b").force is False
    assert LinkHave.__slots__ == ("kind", "target") and GroupHave.__slots__ == ("row",)
    assert UserWant.__slots__ == ("spec", "home", "shell")
    have = UserHave(("web", "x", "1"), "web", frozenset({"b", "a"}))
    assert (have.shadow, have.home_exists) == (None, True)
    secret = have.replace(shadow=("web", "$6$salt$hash"))
    assert secret == UserHave(("web", "x", "1"), "web", frozenset({"a", "b"}), ("web", "$6$salt$hash"), True)
    assert repr(secret) == "UserHave(row=('web', 'x', '1'), groups=['a', 'b'])" and "hash" not in repr(secret)
    assert PkgHave("1").replace(candidate="2").as_dict() == {"version": "1", "config_files": False, "candidate": "2"}


def test_the_mutable_ones_compare_by_value_and_are_not_hashable(tmp_path):
    resource = Resource(0, "File", "/a", SimpleNamespace(requires=[], subscribes=[]))
    out = Outcome(resource)
    assert (out.action, out.state, out.changed, out.duration_seconds) == (Action.NONE, ResourceState.PENDING,
                                                                          False, 0.0)
    assert out == Outcome(resource) and out != Outcome(resource, state=ResourceState.FAILED)
    with pytest.raises(AttributeError):  # an outcome is made once, by the executor
        out.state = ResourceState.CONVERGED
    assert out.replace(state=ResourceState.CONVERGED).state is ResourceState.CONVERGED
    done = Completed(("true",), 0, "", "")
    assert done.timed_out is False and done == Completed(("true",), 0, "", "", False)
    result = PassResult({}, [], 0)
    assert (result.reboot_now, result.warnings) == (False, []) and result.warnings is not PassResult({}, [], 0).warnings
    ctx = HostContext(root=tmp_path)
    assert (ctx.mode, ctx.manifest_dir, ctx.runner, ctx.cache, ctx.systemd) == (Mode.ENFORCE, Path.cwd(), run, {}, None)
    assert ctx.cache is not HostContext(root=tmp_path).cache
    ctx.systemd = True
    assert ctx.systemd_running()


def test_facts_give_templates_a_copy_and_name_every_fact():
    facts = Facts("h", {"ID": "debian"}, "6.1", "b", 2, 512)
    seen = facts.as_dict()
    assert seen == {"hostname": "h", "os_release": {"ID": "debian"}, "kernel": "6.1", "boot_id": "b",
                    "cpu_count": 2, "memory_mb": 512}
    seen["os_release"]["ID"] = "changed"
    assert facts.os_release == {"ID": "debian"} and Facts("h").os_release == {}
    assert NAMES == {"hostname", "os_release", "kernel", "boot_id", "cpu_count", "memory_mb", "facts"}
    assert os.uname().release  # what running_kernel reads

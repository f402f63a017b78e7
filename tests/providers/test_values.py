"""The pass's values: frozen dataclasses where they describe, a mutable one where a pass keeps state;
secrets never in a repr; and the one read-only ``Attributes`` a provider is handed per resource,
the same whether the manifest was validated now or came from the cache."""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta
from pathlib import Path

import pytest

from datum.core.vocab import Action, Mode, RebootPolicy, ResourceState
from datum.host import compiled
from datum.host.agent import PassResult
from datum.host.executor import Outcome
from datum.host.manifest import SpecMemory, parse_manifest
from datum.host.model import Manifest, Resource
from datum.host.reboot import Decision, Found, Slot
from datum.host.verdict import Verdict
from datum.providers.accounts import Table
from datum.providers.base import Attributes, Beside, Change, Completed, HostContext, run
from datum.providers.exec import ExecHave, ExecWant
from datum.providers.facts import NAMES, Facts
from datum.providers.file import FileHave, FileWant
from datum.providers.group import GroupHave, GroupWant
from datum.providers.line import LineHave, LineWant
from datum.providers.package import PkgHave, PkgWant
from datum.providers.registry import provider
from datum.providers.service import SvcHave, SvcWant
from datum.providers.symlink import LinkHave, LinkWant
from datum.providers.user import UserHave, UserWant


def _config(**kw):
    base = dict(name=None, mode=Mode.ENFORCE, reboot_policy=RebootPolicy.NEVER, maintenance_window=None,
                reboot_command="systemctl reboot", state_path="/x.db", boot_id_file="/b",
                lock_wait=timedelta(seconds=1))
    return compiled.HostConfig(**{**base, **kw})


FROZEN = [
    Change, FileWant, FileHave, Found, Decision, Slot, Table, compiled.HostConfig, Resource, Manifest,
    ExecWant, ExecHave, GroupWant, GroupHave, LineWant, LineHave, PkgWant, PkgHave, SvcWant, SvcHave,
    LinkWant, LinkHave, UserWant, UserHave, Outcome, Verdict, Facts,
]


@pytest.mark.parametrize("cls", FROZEN, ids=lambda c: c.__name__)
def test_every_value_of_a_pass_is_a_frozen_slotted_dataclass(cls):
    assert cls.__dataclass_params__.frozen and "__slots__" in vars(cls)


def test_what_a_pass_produced_is_a_slotted_dataclass():
    assert not PassResult.__dataclass_params__.frozen and "__slots__" in vars(PassResult)


def test_the_defaults_and_the_copies():
    assert Change() == Change(Action.NONE, (), None, False) and Change().summary == "none"
    assert dataclasses.replace(Change(Action.CREATE, ("absent",)), diff="d", sensitive=True) == Change(
        Action.CREATE, ("absent",), "d", True
    )
    want = FileWant("/a", "/r/a", "present", b"x", None, None, None)
    assert (want.sensitive, want.validate, want.replace, want.backups, want.real) == (False, None, True, 0,
                                                                                       Path("/r/a"))
    assert _config().report_to is None and _config().to_json()["mode"] == "enforce"
    assert compiled.HostConfig.from_json(_config(name="h").to_json()) == _config(name="h")
    spec = Attributes(requires=["File[/b]"], subscribes=["Exec[x]"])
    resource = Resource(3, "File", "/a", spec)
    assert resource.id == "File[/a]" and resource.needs == ["File[/b]", "Exec[x]"]
    assert resource == Resource(3, "File", "/a", spec) and "id" not in repr(resource)
    manifest = Manifest(Path("/m"), (resource,), (0,))
    assert (manifest.source, manifest.paths, manifest.ordered()) == ("<manifest>", frozenset(), [resource])


def test_a_secret_is_never_in_a_repr():
    have = UserHave(("web", "x", "1"), "web", frozenset({"b", "a"}), ("web", "$6$salt$hash"))
    assert repr(have) == "UserHave(row=('web', 'x', '1'), groups=['a', 'b'])"
    assert "hash" not in repr(Table("/etc/shadow", (("web", "$6$salt$hash"),)))
    spec = Attributes(name="web", password="$6$salt$hash")
    assert repr(spec) == "Attributes(name, password)" and "hash" not in repr(Resource(0, "User", "web", spec))


def test_an_outcome_is_made_once():
    resource = Resource(0, "File", "/a", Attributes(requires=[], subscribes=[]))
    out = Outcome(resource)
    assert (out.action, out.state, out.changed, out.duration_seconds) == (Action.NONE, ResourceState.PENDING,
                                                                          False, 0.0)
    assert out == Outcome(resource) and out != Outcome(resource, state=ResourceState.FAILED)
    with pytest.raises(AttributeError):  # an outcome is made once, by the executor
        out.state = ResourceState.CONVERGED
    assert out.replace(state=ResourceState.CONVERGED).state is ResourceState.CONVERGED
    result = PassResult({}, [], 0)
    assert (result.reboot_now, result.warnings) == (False, []) and result.warnings is not PassResult({}, [], 0).warnings


def test_a_host_context_keeps_state_and_its_own_cache(tmp_path):
    ctx = HostContext(root=tmp_path)
    assert (ctx.mode, ctx.manifest_dir, ctx.runner, ctx.cache, ctx.systemd) == (Mode.ENFORCE, Path.cwd(), run, {}, None)
    assert ctx.cache is not HostContext(root=tmp_path).cache
    ctx.systemd = True
    assert ctx.systemd_running()
    done = Completed(("true",), 0, "", "")
    assert done.timed_out is False and done == Completed(("true",), 0, "", "", False)


def test_facts_give_templates_a_copy_and_name_every_fact():
    facts = Facts("h", {"ID": "debian"}, "6.1", "b", 2, 512)
    seen = facts.as_dict()
    assert seen == {"hostname": "h", "os_release": {"ID": "debian"}, "kernel": "6.1", "boot_id": "b",
                    "cpu_count": 2, "memory_mb": 512}
    seen["os_release"]["ID"] = "changed"
    assert facts.os_release == {"ID": "debian"} and Facts("h").os_release == {}
    assert NAMES == {"hostname", "os_release", "kernel", "boot_id", "cpu_count", "memory_mb", "facts"}
    assert os.uname().release  # what datum.providers.reads.kernel reads


MANIFEST = """resources:
  - File[/srv/a]:
      source: a.txt
      mode: "0644"
  - File[/srv/b]:
      template: b.j2
      sensitive: true
  - User[web]:
      password: "$6$salt$hash"
  - Exec[make]:
      command: make
      creates: /srv/made
"""


def test_a_pass_gets_the_same_read_only_attributes_validated_or_cached(tmp_path, monkeypatch):
    """Validated now, remembered by the spec memory, or loaded from the validated-manifest cache:
    one ``Attributes`` type, equal values; and it cannot be changed by a provider."""
    monkeypatch.setenv("DATUM_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "a.txt").write_text("a\n")
    (tmp_path / "b.j2").write_text("{{ hostname }}\n")
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST)
    memory = SpecMemory()
    fresh = parse_manifest(MANIFEST, tmp_path, str(path), memory=memory)
    remembered = parse_manifest(MANIFEST, tmp_path, str(path), memory=SpecMemory(known=memory.used))
    key = compiled.cache_key(str(path), None)
    compiled.store(key, _config(), fresh)
    loaded = compiled.load(key)
    assert loaded is not None
    for manifest in (fresh, remembered, loaded[1]):
        assert [type(r.spec) for r in manifest.resources] == [Attributes] * 4
        assert [vars(r.spec) for r in manifest.resources] == [vars(r.spec) for r in fresh.resources]
    spec = loaded[1].resources[0].spec
    with pytest.raises(AttributeError):
        spec.mode = 0o777
    with pytest.raises(AttributeError):
        del spec.mode


def test_generic_code_asks_the_provider_what_a_resource_reads_holds_and_touches(tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    (tmp_path / "b.j2").write_text("b\n")
    manifest = parse_manifest(MANIFEST, tmp_path)
    a, b, user, make = ((provider(r.type), r.spec) for r in manifest.resources)
    assert a[0].beside(a[1]) == [Beside("source", "a.txt")]
    assert b[0].beside(b[1]) == [Beside("template", "b.j2", may_leave=False)]
    assert [p.secret(s) for p, s in (a, b, user, make)] == [True, True, True, False]
    assert make[0].touches(make[1]) == ["/srv/made"] and make[0].beside(make[1]) == []
    assert a[0].touches(a[1]) == ["/srv/a"]

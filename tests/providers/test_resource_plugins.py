"""Resource types from plugins: a distribution declaring entry points in group ``datum.resources``
(as the nine built-ins do) validates, appears in ``datum schema`` and runs in a pass; a plugin that
raises on import is named with why, and only its own resources are refused.

Each plugin is a real distribution: a module and its ``.dist-info`` (METADATA, entry_points.txt)
in a directory put on ``PYTHONPATH`` of a real ``datum`` process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

THING = '''
"""A plugin's resource type: a file holding a word."""
import os
from dataclasses import dataclass
from datum.core.vocab import Action
from datum.providers.base import Change, PathProvider


@dataclass(frozen=True)
class Want:
    real: str
    word: str


def spec():
    from datum.providers.spec import HostPath, Spec

    class ThingSpec(Spec):
        path: HostPath
        word: str

    return ThingSpec


class ThingProvider(PathProvider):
    type = "Thing"
    namevar = "path"
    spec = spec()

    def desired(self, name, spec, ctx):
        return Want(ctx.real(spec.path), spec.word)

    def observe(self, want, ctx):
        try:
            with open(want.real) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def plan(self, want, have):
        return Change() if have == want.word else Change(Action.CREATE if have is None else Action.UPDATE)

    def apply(self, want, have, change, ctx):
        with open(want.real, "w") as f:
            f.write(want.word)
'''


def _dist(site: Path, name: str, module: str, source: str, entry_points: str) -> None:
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[datum.resources]\n{entry_points}\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    _dist(site, "datum-thing", "datum_thing", THING, "Thing = datum_thing:ThingProvider")
    return site


def _datum(tmp_path: Path, site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site), "DATUM_HOME": str(tmp_path / "home")}
    env.pop("DATUM_CONFIG", None)
    return subprocess.run([sys.executable, "-c", "from datum.cli.main import main; main()", *args],
                          env=env, capture_output=True, text=True, check=False)


MANIFEST = 'resources:\n  - File[/etc/motd]:\n      content: "hi\\n"\n  - Thing[/greeting]:\n      word: hello\n'


def test_a_plugins_resource_type_validates_is_in_the_schema_and_runs(tmp_path, site):
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST)
    root = tmp_path / "root"
    root.mkdir()
    done = _datum(tmp_path, site, "validate", str(manifest))
    assert done.returncode == 0, done.stderr
    schema = json.loads(_datum(tmp_path, site, "schema").stdout)
    assert {"Thing", "File", "Exec"} <= set(schema["$defs"])
    assert schema["$defs"]["Thing"]["required"] == ["word"]  # the name fills path (its namevar)
    first = _datum(tmp_path, site, "apply", str(manifest), "--root", str(root))
    assert first.returncode == 2, first.stdout + first.stderr
    assert (root / "greeting").read_text() == "hello" and (root / "etc/motd").read_text() == "hi\n"
    again = _datum(tmp_path, site, "apply", str(manifest), "--root", str(root))  # the cached manifest
    assert again.returncode == 0 and "Thing[/greeting]" in again.stdout, again.stdout + again.stderr
    manifest.write_text(MANIFEST.replace("word: hello", "word: 3"))
    bad = _datum(tmp_path, site, "validate", str(manifest))
    assert bad.returncode == 65 and "resources[1].Thing[/greeting].word" in bad.stderr


def test_a_broken_plugin_is_named_with_why_and_takes_nothing_else_down(tmp_path, site):
    _dist(site, "datum-broken", "datum_broken", "raise RuntimeError('boom at import')\n",
          "Broken = datum_broken:BrokenProvider")
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST)
    assert _datum(tmp_path, site, "validate", str(manifest)).returncode == 0
    schema = _datum(tmp_path, site, "schema")
    assert schema.returncode == 0
    assert {"Thing", "File"} <= set(json.loads(schema.stdout)["$defs"])
    assert "Broken" not in json.loads(schema.stdout)["$defs"]
    assert "Broken" in schema.stderr and "datum-broken" in schema.stderr and "boom at import" in schema.stderr
    manifest.write_text(MANIFEST + "  - Broken[x]: {}\n")
    refused = _datum(tmp_path, site, "validate", str(manifest), "--json")
    assert refused.returncode == 65
    (field,) = json.loads(refused.stdout)["issues"][0]["fields"]
    assert field["field"] == "resources[2].Broken[x]"
    assert "datum-broken" in field["message"] and "RuntimeError: boom at import" in field["message"]


def test_discovery_is_remembered_until_the_installation_changes(tmp_path, site, monkeypatch):
    from datum import discovery

    monkeypatch.setenv("DATUM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(site))
    discovery.forget()
    try:
        assert "Thing" in {ep.name for ep in discovery.entry_points("datum.resources")}
        assert list((tmp_path / "cache").glob("entry-points-*.idx"))
        discovery.forget()
        assert discovery._load() is not None  # the same installation: no scan
        _dist(site, "datum-other", "datum_other", "", "Other = datum_other:OtherProvider")
        assert discovery._load() is None  # a distribution added: scanned again
        discovery.forget()
        assert "Other" in {ep.name for ep in discovery.entry_points("datum.resources")}
    finally:
        discovery.forget()

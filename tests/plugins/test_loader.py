"""Loading plugins from entry points: each way a plugin can be broken refuses it alone, saying why.

The entry points are real ``importlib.metadata.EntryPoint`` objects naming
modules written to a temporary directory on ``sys.path``.
"""

from __future__ import annotations

import sys
import textwrap
from importlib.metadata import EntryPoint

import pytest
from fastapi import FastAPI

from datum.plugins.loader import _load
from datum.plugins.spec import GROUP

GOOD = """
from datum.sdk import ReconcilerPlugin, ReconcilerSettings, Waiting


class R:
    name = "{name}"
    def __init__(self, settings, store): pass
    def run(self, ctx):
        raise Waiting("{name}.stuck", "x")


plugin = ReconcilerPlugin(name="{name}", reconciler=R, reasons={{"stuck": "stuck for a test"}}{extra})
"""


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """``modules(name, source)`` writes a module importable as ``name``; returns its entry point."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def write(module: str, source: str, ep_name: str | None = None) -> EntryPoint:
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
        written.append(module)
        return EntryPoint(ep_name or module, f"{module}:plugin", GROUP)

    yield write
    for module in written:
        sys.modules.pop(module, None)


def good(name: str, extra: str = "") -> str:
    return GOOD.format(name=name, extra=extra)


def test_a_good_plugin_loads_and_its_reasons_are_registered(modules):
    from datum.core.vocab import registered

    loaded = _load([modules("okplug", good("okplug"))])
    assert [p.name for p in loaded.plugins] == ["okplug"] and loaded.broken == ()
    assert registered("okplug.stuck").namespace == "okplug"
    assert list(loaded.registry()) == ["okplug"]


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("raise ImportError('no module named fancylib')", "ImportError: no module named fancylib"),
        ("plugin = 42", "is a int, not a datum.sdk.ReconcilerPlugin"),
        (good("othername"), "declares a plugin named 'othername'"),
        (good("bad1", ", api_version=99"), "written for datum.sdk API_VERSION 99"),
        (good("bad1", ", routes='x:y', prefix='/v1/hosts/mine'"), "is Datum's own"),
        (good("bad1", ", routes='x:y', prefix='/api/x'"), "is not a path under /v1"),
        (good("bad1", ", migrations='/nonexistent/versions'"), "does not exist"),
        (good("bad1", ", settings=dict"), "is not a ReconcilerSettings subclass"),
        (good("bad1").replace('reasons={"stuck"', 'reasons={"other"'), "emits reasons it did not register"),
        (good("bad1").replace('"bad1.stuck"', '"buckets.x"'), "emits reasons it did not register"),
        (good("bad1").replace('"stuck": "stuck for a test"', '"Stuck": "d"'), "not a lower-case identifier"),
    ],
)
def test_a_broken_plugin_is_refused_alone_with_why(modules, source, why):
    from datum.core.vocab import plugin_reasons

    eps = [modules("bad1", source), modules("fine", good("fine"))]
    loaded = _load(eps)
    assert [p.name for p in loaded.plugins] == ["fine"]
    (broken,) = loaded.broken
    assert broken.name == "bad1" and why in broken.error, broken.error
    assert not any(r.namespace == "bad1" for r in plugin_reasons())  # a refused plugin leaves no reasons


def test_two_plugins_of_one_name_the_second_is_refused(modules):
    loaded = _load([modules("dup", good("dup")), modules("dup2", good("dup"), ep_name="dup")])
    assert [p.name for p in loaded.plugins] == ["dup"]
    assert "already loaded" in loaded.broken[0].error


def test_a_second_plugin_on_a_taken_prefix_is_refused(modules):
    routes = ", routes='x:y', prefix='/v1/same'"
    loaded = _load([modules("first", good("first", routes)), modules("second", good("second", routes))])
    assert [p.name for p in loaded.plugins] == ["first"]
    assert "prefix /v1/same is already plugin 'first'" in loaded.broken[0].error


def test_routes_that_do_not_import_or_a_fragment_that_does_not_merge_leave_the_server_up(modules):
    from datum.api.plugins import mount_plugins, schema_fragments

    eps = [
        modules("noroutes", good("noroutes", ", routes='nowhere_at_all:router', prefix='/v1/noroutes'")),
        modules("badcedar", good("badcedar", ", cedar_schema='entity Host;', routes='x:y', prefix='/v1/badcedar'")),
        modules("fine2", good("fine2")),
    ]
    loaded = _load(eps)
    app = FastAPI()
    fragments = schema_fragments(loaded)
    problems = mount_plugins(app, loaded, fragments)
    assert set(problems) == {"noroutes", "badcedar"}
    assert "ModuleNotFoundError" in problems["noroutes"] and "does not merge" in problems["badcedar"]
    assert fragments == {}


def test_a_configured_section_of_a_broken_plugin_stops_nothing(modules):
    from datum.config import Settings
    from datum.core.findings import Problem

    loaded = _load([modules("bad2", "raise RuntimeError('boom')"), modules("fine3", good("fine3"))])
    registry = loaded.registry()
    registry.validate(Settings(reconcilers={"bad2": {"anything": 1}, "fine3": {}}))
    with pytest.raises(Problem, match="not registered"):
        registry.validate(Settings(reconcilers={"never_installed": {}}))

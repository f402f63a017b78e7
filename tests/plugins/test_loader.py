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


@pytest.mark.parametrize("order", [1, -1], ids=["in-order", "reversed"])
def test_two_plugins_of_one_name_are_both_refused_whatever_the_order(modules, order):
    eps = [modules("dup", good("dup")), modules("dup2", good("dup"), ep_name="dup")][::order]
    loaded = _load(eps)
    assert loaded.plugins == ()
    assert sorted(b.target for b in loaded.broken) == ["dup2:plugin", "dup:plugin"]
    assert all("declares the name dup, as does" in b.error and "neither is loaded" in b.error for b in loaded.broken)
    (row,) = loaded.unloaded()  # one row on the surfaces, naming both
    assert row.name == "dup" and "dup:plugin" in row.target and "dup2:plugin" in row.target


@pytest.mark.parametrize("order", [1, -1], ids=["in-order", "reversed"])
@pytest.mark.parametrize("second", ["/v1/same", "/v1/same/under"])
def test_plugins_on_one_prefix_or_nested_prefixes_are_both_refused(modules, order, second):
    eps = [
        modules("first", good("first", ", routes='x:y', prefix='/v1/same'")),
        modules("second", good("second", f", routes='x:y', prefix='{second}'")),
        modules("third", good("third", ", routes='x:y', prefix='/v1/samefoot'")),  # not under /v1/same
    ][::order]
    loaded = _load(eps)
    assert [p.name for p in loaded.plugins] == ["third"]
    assert sorted(b.name for b in loaded.broken) == ["first", "second"]
    assert all("the prefix /v1/same" in b.error and "neither is loaded" in b.error for b in loaded.broken)


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

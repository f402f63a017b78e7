"""The examples of docs/extending.md are complete and work: written out, loaded as plugins, run."""

from __future__ import annotations

import re
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from datum.config import Settings
from datum.plugins.loader import _load
from datum.plugins.spec import GROUP
from datum.reconcile.report import drift_report
from datum.reconcile.runner import Runner
from datum.store import open_store

DOC = Path(__file__).resolve().parents[2] / "docs" / "extending.md"


def files() -> dict[str, str]:
    """Every ```python block of the document that starts with ``# file: PATH``."""
    blocks = re.findall(r"```python\n# file: (\S+)\n(.*?)```", DOC.read_text(), re.S)
    return dict(blocks)


@pytest.fixture
def doc_plugins(tmp_path, monkeypatch):
    for path, text in files().items():
        target = tmp_path / "src" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    loaded = _load([EntryPoint("notes", "notes_plugin:plugin", GROUP), EntryPoint("quotas", "quota_plugin:plugin", GROUP)])
    yield loaded
    for module in [m for m in sys.modules if m.startswith(("notes_plugin", "quota_plugin"))]:
        del sys.modules[module]


def test_the_document_has_both_examples():
    assert {"notes_plugin/__init__.py", "notes_plugin/reconciler.py", "quota_plugin/__init__.py"} <= set(files())


def test_the_converge_example_loads_and_converges(doc_plugins, tmp_path):
    assert doc_plugins.broken == ()
    root = tmp_path / "notes"
    root.mkdir()
    (root / "stray").write_text("old")
    (root / "keep").write_text("PINNED by hand")
    settings = Settings(
        store=f"sqlite:///{tmp_path / 'd.db'}",
        reconcilers={"notes": {"root": str(root), "notes": ["alpha", "beta"], "confirmation_ticks": 1,
                               "breaker": {"reap": {"count": 10, "fraction": 1}}}},
    )
    registry = doc_plugins.registry()
    store = open_store(settings.store_url)
    Runner(registry, settings, store).tick("notes")
    assert sorted(p.name for p in root.iterdir()) == ["alpha", "beta", "keep"]
    report = drift_report(registry, settings, store, "notes", settings_now()).dump()
    assert [(i["id"], i["reason"]) for i in report["items"] if i["reason"] != "acting"] == [("keep", "notes.pinned")]
    store.dispose()


def test_the_bespoke_example_reports_items_coverage_and_its_result(doc_plugins, tmp_path):
    settings = Settings(store=f"sqlite:///{tmp_path / 'd.db'}")
    registry = doc_plugins.registry()
    store = open_store(settings.store_url)
    Runner(registry, settings, store).tick("quotas")
    report = drift_report(registry, settings, store, "quotas", settings_now()).dump()
    assert report["itemsReported"] is True and report["coverageReported"] is True
    assert (report["health"], report["error"]) == ("degraded", "1 tenant(s) over quota")
    assert [i["id"] for i in report["items"]] == ["acme"]
    stranded = {c["status"] for c in report["coverage"] if c["stranded"]}
    assert stranded == {"suspended"}
    store.dispose()


def settings_now():
    from datetime import UTC, datetime

    return datetime.now(UTC)

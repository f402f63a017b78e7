"""The host benchmarks time Datum as installed: with its bytecode compiled, never compiling it in every pass."""

import importlib.util
import os
import shutil
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
SRC = Path(__file__).resolve().parents[2] / "src"


def _host():
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("_host", BENCH / "_host.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["_host"] = module
    spec.loader.exec_module(module)
    return module


def test_the_datum_package_the_command_imports_is_compiled_before_it_is_timed(tmp_path):
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    sources = sorted((copy / "datum").rglob("*.py"))
    assert sources and all(not _compiled(p) for p in sources)
    assert _host().compiled_datum(env) == str(copy / "datum")  # the copy is what the command imports
    assert [p for p in sources if not _compiled(p)] == []


def _compiled(source: Path) -> bool:
    return Path(importlib.util.cache_from_source(str(source))).exists()

"""Fixtures of the command-line tests: a populated store (``scene.py``), read at 80 columns."""

from __future__ import annotations

import pytest

from .scene import Scene, populate


@pytest.fixture
def scene(tmp_path, monkeypatch) -> Scene:
    monkeypatch.setenv("COLUMNS", "80")
    return populate(tmp_path)

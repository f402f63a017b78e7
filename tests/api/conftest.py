"""Fixtures of the API tests: the buckets story behind an app (see ``story.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .story import build_story


@pytest.fixture
def story(tmp_path: Path):
    s = build_story(tmp_path)
    yield s
    s.client.close()
    s.store.dispose()


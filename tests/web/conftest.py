"""The browser the page tests drive (``web.browser``)."""

from __future__ import annotations

import pytest

from web.browser import browser_context_at


@pytest.fixture
def browser_context(tmp_path):
    yield from browser_context_at(tmp_path)

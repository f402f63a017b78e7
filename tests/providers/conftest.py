"""Provider fixtures: a HostContext over a temporary root."""

from __future__ import annotations

from pathlib import Path

import pytest

from datum.providers.base import HostContext


@pytest.fixture
def ctx(tmp_path: Path) -> HostContext:
    root = tmp_path / "root"
    root.mkdir()
    return HostContext(root=root, manifest_dir=tmp_path)

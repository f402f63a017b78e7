"""Resource type -> provider, imported on first use so a pass loads only the types its manifest has."""

from __future__ import annotations

import importlib
from typing import Any

from datum.providers.base import Provider

TYPES: dict[str, str] = {
    "File": "datum.providers.file",
    "Directory": "datum.providers.directory",
    "Symlink": "datum.providers.symlink",
    "Line": "datum.providers.line",
    "Package": "datum.providers.package",
    "Service": "datum.providers.service",
    "User": "datum.providers.user",
    "Group": "datum.providers.group",
    "Exec": "datum.providers.exec",
}


def provider(type_name: str) -> Provider[Any, Any, Any]:
    """The provider of ``type_name``; KeyError when there is none."""
    module = importlib.import_module(TYPES[type_name])
    found: Provider[Any, Any, Any] = module.PROVIDER
    return found

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


_LOADED: dict[str, Provider[Any, Any, Any]] = {}


def provider(type_name: str) -> Provider[Any, Any, Any]:
    """The provider of ``type_name``; KeyError when there is none."""
    found = _LOADED.get(type_name)
    if found is None:
        found = _LOADED[type_name] = importlib.import_module(TYPES[type_name]).PROVIDER
    return found

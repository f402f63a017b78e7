"""Plugins: what a reconciler plugin declares, and finding the installed ones through entry points.

The built-in reconcilers are found the same way (Datum's own ``pyproject.toml``
declares them in the ``datum.reconcilers`` group). A plugin that cannot be
loaded is reported (``Broken``), never fatal to the others. Names are imported
on first use: listing the plugins' commands (``datum --help``) imports no
database or validation library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "API_VERSION": "datum.plugins.spec",
    "GROUP": "datum.plugins.spec",
    "ReconcilerPlugin": "datum.plugins.spec",
    "Broken": "datum.plugins.loader",
    "Loaded": "datum.plugins.loader",
    "discover": "datum.plugins.loader",
    "load": "datum.plugins.loader",
    "plugin_commands": "datum.plugins.commands",
}

__all__ = ["API_VERSION", "GROUP", "Broken", "Loaded", "ReconcilerPlugin", "discover", "load", "plugin_commands"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'datum.plugins' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


if TYPE_CHECKING:
    from datum.plugins.commands import plugin_commands
    from datum.plugins.loader import Broken, Loaded, discover, load
    from datum.plugins.spec import API_VERSION, GROUP, ReconcilerPlugin

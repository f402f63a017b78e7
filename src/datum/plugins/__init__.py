"""Plugins: what a reconciler plugin declares, and finding the installed ones through entry points.

The built-in reconcilers are found the same way (Datum's own ``pyproject.toml``
declares them in the ``datum.reconcilers`` group). A plugin that cannot be
loaded is reported (``Broken``), never fatal to the others.
"""

from datum.plugins.loader import Broken, Loaded, discover, load, plugin_commands
from datum.plugins.spec import API_VERSION, GROUP, ReconcilerPlugin

__all__ = [
    "API_VERSION",
    "GROUP",
    "Broken",
    "Loaded",
    "ReconcilerPlugin",
    "discover",
    "load",
    "plugin_commands",
]

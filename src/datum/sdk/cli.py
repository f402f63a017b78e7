"""What a plugin's CLI commands use: the ``--config`` and ``--json`` options, and opening what they name.

``wire(config)`` loads and validates the configuration, loads the plugins and
opens the store (their tables migrated): ``.settings``, ``.registry``, ``.store``.
``console()`` is the terminal the other commands print to.
"""

from __future__ import annotations

from datum.cli.common import Wired, config_option, json_option, wire
from datum.cli.render import console

__all__ = ["Wired", "config_option", "console", "json_option", "wire"]

"""What a plugin's CLI commands use: the ``--config`` and ``--json`` options, and opening what they name.

``wire(config)`` loads and validates the configuration, loads the plugins and
opens the store (their tables migrated): ``.settings``, ``.registry``, ``.store``.
``console(wide)`` is the terminal the other commands print to, ``table()`` a table with a header
as theirs, ``Times(now, wide)`` their one time form (relative, absolute UTC with ``--wide``,
``wide_option``), ``text(value)`` a cell never read as markup.
"""

from __future__ import annotations

from datum.cli.common import Wired, config_option, json_option, wide_option, wire
from datum.cli.render import Times, console, table, text

__all__ = ["Times", "Wired", "config_option", "console", "json_option", "table", "text", "wide_option", "wire"]

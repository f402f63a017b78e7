"""Where Datum keeps its state when the configuration does not say (``DATUM_HOME``).

Apart from ``datum.config`` so that a pass with no configuration file learns it
without importing pydantic and the whole settings model.
"""

from __future__ import annotations

import os
from pathlib import Path


def default_home() -> Path:
    """``$DATUM_HOME``; else ``/var/lib/datum`` as root; else ``$XDG_STATE_HOME/datum``."""
    if home := os.environ.get("DATUM_HOME"):
        return Path(home).expanduser()
    if os.geteuid() == 0:
        return Path("/var/lib/datum")
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "datum"

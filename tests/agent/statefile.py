"""What a test reads of an agent's state file: its last pass report, as ``datum status`` would."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any


def last_report(db: Path) -> dict[str, Any]:
    """The agent's latest pass report in its state file ``db``; ``{"state": None}`` before any pass."""
    conn = sqlite3.connect(db)
    try:
        row = conn.execute("SELECT report FROM agent_reports").fetchone()
    finally:
        conn.close()
    return json.loads(row[0]) if row else {"state": None}  # type: ignore[no-any-return]

"""The agent's part of its local state file: spool, sequence numbers, the last fetched manifest.

The tables are made by ``datum.host.lock`` (one schema for the file);
only the agent writes them. A report is spooled in the same transaction that
persists it as the host's last pass (``StateStore.record``), so a pass is
never persisted and then lost on the way to the server.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from datum.host.lock import open_local

MAX_SPOOL = 10_000  # past it the oldest undelivered reports go (and the log says how many)


class AgentState:
    def __init__(self, path: str) -> None:
        self.path = path
        self.db = open_local(path)

    def close(self) -> None:
        self.db.close()

    def next_seq(self) -> int:
        """The next sequence number of this host's passes, durable before the pass runs.

        A new state file starts at the current time in milliseconds, so an agent
        whose file was lost still outranks every pass it sent before.
        """
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT value FROM agent_meta WHERE key = 'seq'").fetchone()
            seq = int(row[0]) + 1 if row else int(time.time() * 1000)
            db.execute("INSERT OR REPLACE INTO agent_meta (key, value) VALUES ('seq', ?)", (str(seq),))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return seq

    def pending(self) -> list[tuple[int, dict[str, Any]]]:
        """Undelivered reports, oldest first."""
        rows = self.db.execute("SELECT seq, report FROM agent_spool ORDER BY seq").fetchall()
        return [(int(seq), json.loads(report)) for seq, report in rows]

    def delivered(self, seq: int) -> None:
        self.db.execute("DELETE FROM agent_spool WHERE seq = ?", (seq,))

    def trim(self) -> int:
        """Drop the oldest undelivered reports past ``MAX_SPOOL``; how many went."""
        cur = self.db.execute(
            "DELETE FROM agent_spool WHERE seq NOT IN (SELECT seq FROM agent_spool ORDER BY seq DESC LIMIT ?)",
            (MAX_SPOOL,),
        )
        return int(cur.rowcount or 0)

    def last_manifest(self) -> tuple[str, bytes, str] | None:
        """The last manifest the server gave: (digest, body, fetched at)."""
        row = self.db.execute("SELECT digest, body, fetched_at FROM agent_manifest WHERE id = 1").fetchone()
        return (str(row[0]), bytes(row[1]), str(row[2])) if row else None

    def keep_manifest(self, digest: str, body: bytes) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO agent_manifest (id, digest, body, fetched_at) VALUES (1, ?, ?, ?)",
            (digest, body, datetime.now(UTC).isoformat()),
        )

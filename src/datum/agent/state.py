"""The agent's part of its local state file: spool, sequence numbers, the last fetched manifest.

The file's schema and every statement on it are ``datum.host.statedb``'s (one owner of the file);
only the agent writes these tables. A report is spooled in the same transaction that persists it
as the host's last pass (``StateStore.record``), so a pass is never persisted and then lost on the
way to the server.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from datum.host import statedb

MAX_SPOOL = 10_000  # past it the oldest undelivered reports go (and the log says how many)


class AgentState:
    def __init__(self, path: str) -> None:
        self.path = path
        self.db = statedb.open_local(path)

    def close(self) -> None:
        self.db.close()

    def next_seq(self) -> int:
        """The next sequence number of this host's passes, durable before the pass runs
        (``datum.host.statedb.next_seq``)."""
        return statedb.next_seq(self.db)

    def pending(self) -> list[tuple[int, dict[str, Any]]]:
        """Undelivered reports, oldest first."""
        return [(seq, json.loads(report)) for seq, report in statedb.spooled(self.db)]

    def delivered(self, seq: int) -> None:
        statedb.delivered(self.db, seq)

    def trim(self) -> int:
        """Drop the oldest undelivered reports past ``MAX_SPOOL``; how many went."""
        return statedb.trim_spool(self.db, MAX_SPOOL)

    def last_manifest(self) -> tuple[str, bytes, str] | None:
        """The last manifest the server gave: (digest, body, fetched at)."""
        return statedb.last_manifest(self.db)

    def keep_manifest(self, digest: str, body: bytes) -> None:
        statedb.keep_manifest(self.db, digest, body, datetime.now(UTC).isoformat())

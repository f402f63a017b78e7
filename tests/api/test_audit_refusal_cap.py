"""The cap on refusals written at once (``datum.api.front.audit.REFUSALS``), against a real ``datum serve`` on a real
SQLite store: while that many refusal rows wait on the store, a flood of further refusals is answered at once and
not written (a client without a token cannot make the server queue a write per request), and the next refusal
written says how many were not."""

from __future__ import annotations

import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from datum.api.front.audit import REFUSALS

from .story import config_file, serving

FLOOD = 3 * REFUSALS


def _refused(base: str) -> int:
    return httpx.get(base + "v1/hosts", timeout=60).status_code  # no token: 401, a refusal's row


def _rows(db: str) -> list[tuple[str, str | None]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT outcome, detail FROM audit_log WHERE outcome = 'unauthenticated' "
                            "ORDER BY id").fetchall()


def test_refusals_past_the_cap_are_answered_not_written_and_the_next_row_counts_them(tmp_path):
    cfg = config_file(tmp_path, scheduler=False)
    db = str(tmp_path / "datum.db")
    with serving(cfg, tmp_path / "serve.log") as base, ThreadPoolExecutor(REFUSALS + FLOOD) as pool:
        assert _refused(base) == 401 and len(_rows(db)) == 1  # one refusal: one row, nothing dropped
        holder = sqlite3.connect(db, isolation_level=None, timeout=30)
        holder.execute("BEGIN IMMEDIATE")  # the store's write lock held: a refusal's row waits for it
        try:
            waiting = [pool.submit(_refused, base) for _ in range(REFUSALS)]
            time.sleep(1.0)
            assert not any(f.done() for f in waiting)  # each is writing its row: as many as the cap
            flood = [pool.submit(_refused, base) for _ in range(FLOOD)]
            assert [f.result(timeout=20) for f in flood] == [401] * FLOOD  # answered without the store
            assert not any(f.done() for f in waiting)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert [f.result(timeout=60) for f in waiting] == [401] * REFUSALS
        assert len(_rows(db)) == 1 + REFUSALS  # the flood wrote nothing
        assert _refused(base) == 401
        rows = _rows(db)
        assert len(rows) == 2 + REFUSALS
        assert rows[-1][1] == (f"{FLOOD} refusals before this one were not recorded: more than {REFUSALS} were "
                               "being written at once")
        assert all(detail is None for _, detail in rows[:-1])

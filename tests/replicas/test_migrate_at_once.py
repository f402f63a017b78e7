"""``datum store migrate`` from three processes at once: one upgrades, the others find it current."""

from __future__ import annotations

import subprocess
import sys

import pytest
import sqlalchemy as sa

from datum.plugins import load
from datum.store.migrate import HEADS, current_revisions, heads

pytestmark = pytest.mark.empty_store  # stores left at older migrations, or migrated here: made empty

DATUM = [sys.executable, "-c", "from datum.cli.main import main; main()"]


def test_three_migrations_at_once_upgrade_the_store_once(tmp_path, store_url):
    config = tmp_path / "datum.toml"
    config.write_text(f'store = "{store_url}"\n')
    procs = [
        subprocess.Popen([*DATUM, "store", "migrate", "--config", str(config)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    done = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], done
    said = sorted(out.split(": ", 1)[1].strip() for out, _err in done)
    every = HEADS.union(*(heads(b) for b in load().branches()))  # the plugins' branches too
    shown = ", ".join(sorted(every))
    assert said == [f"already at {shown}"] * 2 + [f"upgraded from empty to {shown}"], done
    engine = sa.create_engine(store_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as conn:
        assert current_revisions(conn) == HEADS
        for branch in load().branches():
            assert current_revisions(conn, branch) == heads(branch)
    engine.dispose()

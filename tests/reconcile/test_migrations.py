"""The store's schema comes from Alembic migrations that match the table definitions."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from datum.store import open_store
from datum.store.migrate import HEAD, MIGRATIONS, current_revision
from datum.store.schema import metadata


def test_head_constant_is_the_newest_migration():
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(cfg).get_current_head() == HEAD


def test_a_new_store_is_at_head_and_matches_the_table_definitions(store_url):
    store = open_store(store_url)
    with store.connect() as conn:
        assert current_revision(conn) == HEAD
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    # SQLite cannot tell a timezone-aware timestamp from a naive one; ignore that only.
    assert [d for d in diff if d[0] != "modify_type"] == []
    store.dispose()


def test_opening_twice_is_harmless_and_a_pre_migration_store_is_adopted(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = sa.create_engine(url)
    metadata.create_all(engine)  # how stores were made before migrations
    engine.dispose()
    for _ in range(2):
        store = open_store(url)
        with store.connect() as conn:
            assert current_revision(conn) == HEAD
        store.dispose()


def test_a_store_at_the_baseline_gains_the_claim_token_and_keeps_its_rows(store_url):
    from alembic import command

    from datum.store.migrate import BASELINE

    engine = sa.create_engine(store_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, BASELINE)
        conn.execute(
            sa.text(
                "INSERT INTO reconciler_runs (reconciler, as_of, completed, health, drift, blocked,"
                " dropped, reasons, items, executed_passes, skipped_passes)"
                " VALUES ('buckets', '2026-01-01 00:00:00', false, 'ok', 0, 0, 0, '{}', '[]', 3, 0)"
            )
        )
    engine.dispose()
    store = open_store(store_url)
    with store.connect() as conn:
        assert current_revision(conn) == HEAD
        row = conn.execute(sa.text("SELECT executed_passes, claim FROM reconciler_runs")).one()
    assert tuple(row) == (3, 0)
    store.dispose()

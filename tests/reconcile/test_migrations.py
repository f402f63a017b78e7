"""The store's schema comes from Alembic migrations that match the table definitions."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from datum.store import open_store
from datum.store.migrate import HEAD, HEADS, MIGRATIONS, current_revisions
from datum.store.schema import metadata


def test_head_constant_is_the_newest_migration():
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    scripts = ScriptDirectory.from_config(cfg)
    assert scripts.get_current_head() == HEAD
    assert set(scripts.get_heads()) == HEADS


def test_a_new_store_is_at_head_and_matches_the_table_definitions(store_url):
    store = open_store(store_url)
    with store.connect() as conn:
        assert current_revisions(conn) == HEADS
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
            assert current_revisions(conn) == HEADS
        store.dispose()


# One executed run row as the baseline's columns hold it.
_RUN_ROW = (
    "INSERT INTO reconciler_runs (reconciler, as_of, completed, health, drift, blocked,"
    " dropped, reasons, items, executed_passes, skipped_passes)"
    " VALUES ('buckets', '2026-01-01 00:00:00', false, 'ok', 0, 0, 0, '{}', '[]', 3, 0)"
)


def _store_at(store_url: str, revision: str, *statements: str) -> None:
    """Upgrade an empty store to ``revision`` only, then run ``statements`` in it."""
    from alembic import command

    engine = sa.create_engine(store_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        for statement in statements:
            conn.execute(sa.text(statement))
    engine.dispose()


def _opened(store_url: str, query: str) -> tuple[object, ...]:
    """Open the store (migrating it to HEAD) and answer ``query``'s one row."""
    store = open_store(store_url)
    with store.connect() as conn:
        assert current_revisions(conn) == HEADS
        row = tuple(conn.execute(sa.text(query)).one())
    store.dispose()
    return row


def test_a_store_at_the_baseline_gains_the_claim_token_and_keeps_its_rows(store_url):
    from datum.store.migrate import BASELINE

    _store_at(store_url, BASELINE, _RUN_ROW)
    assert _opened(store_url, "SELECT executed_passes, claim FROM reconciler_runs") == (3, 0)


def test_a_store_at_0004_gains_the_run_metrics_column_empty_until_the_next_pass(store_url):
    _store_at(store_url, "0004", _RUN_ROW)
    assert _opened(store_url, "SELECT executed_passes, metrics FROM reconciler_runs") == (3, None)


def _schema_diff(store) -> list[object]:
    with store.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    return [d for d in diff if d[0] != "modify_type"]


def test_a_tokens_table_made_by_create_all_is_adopted_with_its_tokens(store_url):
    """Before 0006 ``datum token create`` made ``tokens`` with ``create_all``: it upgrades in place."""
    from datum.api.tokens import TokenBook, digest
    from datum.store.schema import tokens

    _store_at(store_url, "0005")
    old = sa.MetaData()  # the table as datum.api.tokens defined it for create_all: the same columns
    tokens.to_metadata(old)
    engine = sa.create_engine(store_url.replace("postgresql://", "postgresql+psycopg://", 1))
    old.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO tokens VALUES (:h, 'operator', '2026-01-01 00:00:00', NULL)"),
            {"h": digest("datum_minted_before")},
        )
    engine.dispose()
    store = open_store(store_url)
    try:
        with store.connect() as conn:
            assert current_revisions(conn) == HEADS
        assert _schema_diff(store) == []
        assert TokenBook({}, store).principal("datum_minted_before") == "operator"
    finally:
        store.dispose()


def test_a_store_without_tokens_gets_the_table_from_the_migration(store_url):
    from datum.api.tokens import TokenBook, create

    _store_at(store_url, "0005")
    store = open_store(store_url)
    try:
        with store.connect() as conn:
            assert sa.inspect(conn).has_table("tokens")
        assert _schema_diff(store) == []
        assert TokenBook({}, store).principal(create(store, "agent", "web1")) == "agent@host:web1"
    finally:
        store.dispose()


def test_migrating_a_current_store_again_does_nothing_whatever_heads_the_fast_path_knows(store_url, monkeypatch):
    """Under the lock the scripts' own heads decide: a plugin branch's head the constant does not name
    (here: a constant out of step) makes migrate look, never upgrade twice or fail."""
    from datum.store import migrate as m

    open_store(store_url).dispose()
    monkeypatch.setattr(m, "HEADS", frozenset({"0005"}))
    engine = sa.create_engine(store_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        done = m.migrate(engine)
        assert (done.before, done.upgraded) == (frozenset({HEAD}), False)
    finally:
        engine.dispose()

"""The store's schema comes from Alembic migrations that match the table definitions."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from datum.store import open_store
from datum.store.migrate import (
    CORE,
    HEAD,
    HEADS,
    MIGRATIONS,
    Branch,
    current_revisions,
    heads,
    migrate,
)
from datum.store.partitions import is_partition
from datum.store.schema import metadata

pytestmark = pytest.mark.empty_store  # migrations run from nothing here, not from a copy of the migrated template


def _alembic_heads(versions) -> set[str]:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("version_locations", str(versions))
    return set(ScriptDirectory.from_config(cfg).get_heads())


def test_heads_read_from_the_files_are_alembics():
    assert set(HEADS) == _alembic_heads(CORE.versions) == {HEAD}
    from datum.reconcilers.buckets.reconciler import BRANCH

    assert set(heads(BRANCH)) == _alembic_heads(BRANCH.versions) == {"buckets_0002"}


def test_a_new_store_is_at_head_and_matches_the_table_definitions(store_url):
    store = open_store(store_url)
    with store.connect() as conn:
        assert current_revisions(conn) == HEADS
    # SQLite cannot tell a timezone-aware timestamp from a naive one; ignore that only.
    assert _schema_diff(store) == []
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
    """Open the store (migrating it to its heads) and answer ``query``'s one row."""
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
    # A count table is made with its triggers in raw DDL (datum.store.status_counts), not declared.
    # The pass archive's day partitions (PostgreSQL) are made by datum.store.partitions, not declared either.
    return [d for d in diff if d[0] != "modify_type" and not (d[0] == "remove_table" and d[1].name.endswith("_status_counts"))
            and not (d[0] in ("remove_table", "remove_index") and is_partition(_table_of(d[1])))]


def _table_of(thing) -> str:
    return thing.name if isinstance(thing, sa.Table) else thing.table.name


def test_a_tokens_table_made_by_create_all_is_adopted_with_its_tokens(store_url):
    """Before 0006 ``datum token create`` made ``tokens`` with ``create_all``: it upgrades in place."""
    from datum.api.front.tokens import TokenBook, digest
    from datum.store.types import UTCDateTime

    _store_at(store_url, "0005")
    old = sa.MetaData()  # the table as datum.api.front.tokens defined it for create_all: its first four columns
    sa.Table(
        "tokens", old, sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("principal", sa.String(100), nullable=False, index=True),
        sa.Column("created_at", UTCDateTime, nullable=False), sa.Column("host", sa.String(253)),
    )
    engine = sa.create_engine(store_url.replace("postgresql://", "postgresql+psycopg://", 1))
    old.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO tokens (sha256, principal, created_at, host) "
                    "VALUES (:h, 'operator', '2026-01-01 00:00:00', NULL)"),
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
    from datum.api.front.tokens import TokenBook, create

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


def test_a_store_at_host_summaries_gains_the_permanent_mark_empty(store_url):
    row = "INSERT INTO item_memory (reconciler, kind, item_id, direction, streak, failures, retry_after_passes)"
    _store_at(store_url, "host_summaries", row + " VALUES ('buckets', 'bucket', 'a', 'restore', 1, 0, 0)")
    assert _opened(store_url, "SELECT streak, permanent FROM item_memory") == (1, None)


def _branch(tmp_path, *revisions: tuple[str, str | None]):
    """A plugin branch whose revisions each create a table named after them."""
    versions = tmp_path / "versions"
    versions.mkdir()
    for revision, down in revisions:
        (versions / f"{revision}.py").write_text(
            "import sqlalchemy as sa\nfrom alembic import op\n"
            f"revision = {revision!r}\ndown_revision = {down!r}\nbranch_labels = None\ndepends_on = None\n"
            f"def upgrade():\n    op.create_table({revision!r}, sa.Column('id', sa.Integer, primary_key=True))\n"
        )
    return Branch.of_plugin("widgets", versions)


def test_a_branch_with_two_heads_is_upgraded_to_both_and_recorded_in_its_own_table(tmp_path):
    branch = _branch(tmp_path, ("w1", None), ("w2a", "w1"), ("w2b", "w1"))
    assert heads(branch) == {"w2a", "w2b"}
    store = open_store(f"sqlite:///{tmp_path / 'd.db'}", branches=[branch])
    with store.connect() as conn:
        assert current_revisions(conn, branch) == {"w2a", "w2b"}
        assert current_revisions(conn) == HEADS  # the core's own table is untouched by the plugin's
        tables = set(sa.inspect(conn).get_table_names())
    assert {"w1", "w2a", "w2b", "alembic_version_widgets"} <= tables
    migrate(store.engine, [CORE, branch])  # current: nothing to do, nothing raised
    store.dispose()


def test_an_uninstalled_plugins_branch_never_stops_the_core_from_upgrading(tmp_path):
    url = f"sqlite:///{tmp_path / 'd.db'}"
    open_store(url, branches=[_branch(tmp_path, ("w1", None))]).dispose()
    store = open_store(url)  # the plugin is gone: its revision is in its own table, not in the core's
    with store.connect() as conn:
        assert current_revisions(conn) == HEADS
    store.dispose()


def test_a_buckets_table_made_by_create_all_is_adopted_by_the_buckets_branch(store_url):
    """Stores made before the branch existed have the table (store.ensure): it upgrades cleanly, rows kept."""
    from datum.reconcilers.buckets import reconciler as buckets

    engine = sa.create_engine(store_url.replace("postgresql://", "postgresql+psycopg://", 1))
    metadata.create_all(engine)
    buckets.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO buckets (name, status, created_at, updated_at)"
            " VALUES ('old', 'active', '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
        ))
    engine.dispose()
    store = open_store(store_url, branches=[buckets.BRANCH])
    with store.connect() as conn:
        assert current_revisions(conn, buckets.BRANCH) == {"buckets_0002"}
        diff = compare_metadata(MigrationContext.configure(conn), buckets.metadata)
    assert [d for d in diff if d[0] not in ("modify_type", "remove_table", "remove_index")] == []
    assert [r["name"] for r in buckets.rows(store)] == ["old"]
    store.dispose()


def test_a_new_store_gets_the_buckets_table_from_its_branch_as_declared(store_url):
    from datum.reconcilers.buckets import reconciler as buckets

    store = open_store(store_url)
    buckets.create(store, "fresh")  # require(): the branch runs on first use
    with store.connect() as conn:
        assert current_revisions(conn, buckets.BRANCH) == {"buckets_0002"}
        diff = compare_metadata(MigrationContext.configure(conn), buckets.metadata)
    assert [d for d in diff if d[0] not in ("modify_type", "remove_table", "remove_index")] == []
    store.dispose()


def _chained_at_0028(n: int) -> list[str]:
    """``n`` rows as 0028 wrote them (each hashed and chained at once) and its head, as INSERT statements."""
    from datetime import UTC, datetime

    from datum.store.audit import COLUMNS, GENESIS, digest

    statements, prev = [], GENESIS
    for seq in range(1, n + 1):
        at = datetime(2026, 12, 6, 23, 0, seq, 123456, tzinfo=UTC)
        values = {c: None for c in COLUMNS} | {"principal": "operator", "action": "fleet:ManageRollout",
                                               "outcome": "allowed", "status": 200}
        own = digest(seq, at, values, prev)
        statements.append(
            "INSERT INTO audit_log (seq, at, principal, action, outcome, status, prev, hash) VALUES "
            f"({seq}, '{at:%Y-%m-%d %H:%M:%S.%f}', 'operator', 'fleet:ManageRollout', 'allowed', 200, '{prev}', '{own}')")
        prev = own
    statements.append(f"UPDATE audit_chain SET seq = {n}, hash = '{prev}' WHERE name = 'head'")
    return statements


def test_an_audit_chain_of_0028_verifies_after_0030_and_goes_on(store_url):
    """0030 keeps every row with its seq, prev and hash (its id its seq): the chain verifies; a row written after
    gets the next id, and sealed, continues the same chain."""
    from datum.store import audit, auditchain

    _store_at(store_url, "0028_audit_log", *_chained_at_0028(3))
    store = open_store(store_url)
    try:
        found = auditchain.verify(store)
        assert found.whole and found.rows == 3 and found.head.seq == 3, found
        auditchain.write(store, audit.Entry("admin", "token:Revoke", 'Token::"x"'))
        assert [e["id"] for e in auditchain.entries(store, limit=10)] == [4, 3, 2, 1]
        assert auditchain.seal(store) == 1
        found = auditchain.verify(store)
        assert found.whole and found.rows == 4 and found.head.seq == 4, found
    finally:
        store.dispose()

"""datum.sdk.DesiredTable: a plugin's desired-state table written once, from its migration to its CRUD.

A plugin of the test's own (a module and a migration branch in a temporary
directory) declares its table with ``DesiredTable`` and makes it with
``upgrade()`` in its first migration; then, on real SQLite and PostgreSQL:
the CRUD the CLI and routes use, the work query a pass reads, and coverage
from the counts the database keeps.
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from datum.core.findings import Problem
from datum.reconcile.coverage import measure
from datum.store import open_store
from datum.store.migrate import Branch
from datum.store.status_counts import counts_name


@pytest.fixture
def notes(tmp_path, store_url, monkeypatch):
    """The plugin's module (its table named per test: PostgreSQL is shared) and its migrated store."""
    table = f"notes_{uuid.uuid4().hex[:8]}"
    module = f"notes_tables_{table}"
    versions = tmp_path / "versions"
    versions.mkdir()
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(f'''
        import sqlalchemy as sa
        from pathlib import Path
        from datum.sdk import Branch, DesiredTable

        BRANCH = Branch.of_plugin("{table}", Path({str(versions)!r}))
        desired = DesiredTable(
            "{table}", sa.MetaData(), sa.Column("text", sa.Text, nullable=False, server_default=""),
            kind="note", noun="note", work_query=("live", "going"), terminal={{"gone"}},
            owned_by={{"review": "the editors"}}, branch=BRANCH,
        )
    '''))
    (versions / f"{table}_0001.py").write_text(textwrap.dedent(f'''
        from {module} import desired

        revision = "{table}_0001"
        down_revision = None
        branch_labels = ("{table}",)
        depends_on = None


        def upgrade():
            desired.upgrade()


        def downgrade():
            desired.downgrade()
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = __import__(module)
    store = open_store(store_url)
    yield mod.desired, store
    sys.modules.pop(module, None)
    with store.begin() as conn:
        for name in (counts_name(table), table, f"alembic_version_{table}"):
            conn.execute(sa.text(f'DROP TABLE IF EXISTS "{name}" CASCADE' if store.engine.dialect.name == "postgresql" else f'DROP TABLE IF EXISTS "{name}"'))
    store.dispose()


def test_a_plugin_table_from_its_migration_to_its_crud_work_query_and_coverage(notes):
    desired, store = notes
    assert desired.rows(store) == []  # the branch migrated on first use
    assert isinstance(desired.branch, Branch)
    assert desired.create(store, "a", "live", text="hello") == "live"
    with pytest.raises(Problem) as conflict:
        desired.create(store, "a", "live")
    assert conflict.value.findings[0].code == "CONFLICT" and "note 'a' already exists (status live)" in str(conflict.value)
    desired.put(store, "b", "review", text="draft")  # the editors own it
    desired.put(store, "b", "review", text="draft 2")  # replaced, not added
    desired.put(store, "c", "typo")  # a status nobody selects, owns or ends in: stranded
    assert [(r["name"], r["status"], r["text"]) for r in desired.rows(store)] == [
        ("a", "live", "hello"), ("b", "review", "draft 2"), ("c", "typo", ""),
    ]
    assert desired.request(store, "a", "going", {"live"}) == "going"
    assert desired.request(store, "b", "going", {"live"}) == "review"  # not from review: left, and said
    with pytest.raises(Problem) as missing:
        desired.request(store, "nope", "going", {"live"})
    assert missing.value.findings[0].code == "NOT_FOUND"
    with store.begin() as conn:
        from datum.reconcile.desired import set_status

        assert set_status(conn, desired.table, "a", "gone", {"going"})  # the pass confirmed it gone
    with pytest.raises(Problem):
        desired.request(store, "a", "going", {"live"})  # a terminal row is not found
    assert desired.create(store, "a", "live") == "live"  # a gone one comes back
    assert desired.status(store, "a") == "live" and desired.status(store, "zz") is None
    with store.connect() as conn:
        work, unselected = desired.work(conn)
    assert set(work) == {"a"} and unselected == {"b", "c"}  # known rows the work query does not select
    rows = {r.status: r for r in measure(store, [desired.coverage()], datetime.now(UTC))}
    assert rows["live"].count == 1 and not rows["live"].stranded
    assert rows["review"].owned_by == "the editors" and not rows["review"].stranded
    assert rows["typo"].stranded
    counted = store.engine.dialect.name  # the counts come from the table the triggers keep
    with store.connect() as conn:
        assert conn.execute(sa.text(f'SELECT COALESCE(SUM(n), 0) FROM "{counts_name(desired.table.name)}"')).scalar() == 3, counted

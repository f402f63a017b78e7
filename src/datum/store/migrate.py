"""Bring a store's tables to the current schema with Alembic, once, whoever gets there first.

The store's schema comes in *branches*: the framework's own tables (``CORE``)
and each plugin's (its own versions directory). Each branch records its
revisions in a version table of its own (``alembic_version`` for the core,
``alembic_version_<plugin>`` for a plugin), so a plugin uninstalled later
never makes Alembic refuse to upgrade the rest, and a branch may have several
heads (two migrations written in parallel off the same parent): every head is
upgraded to.

Opening a store that is already current costs one small query per branch;
the heads are read from the migration files without Alembic, and Alembic is
imported only when there is something to do, so ``datum`` starts fast.
"""

from __future__ import annotations

import ast
import fcntl
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

BASELINE = "0001"
MIGRATIONS = Path(__file__).parent / "migrations"


@dataclass(frozen=True)
class Branch:
    """One lineage of migrations: its name, its versions directory and the table recording it."""

    name: str
    versions: Path
    version_table: str = "alembic_version"

    @staticmethod
    def of_plugin(name: str, versions: Path) -> Branch:
        return Branch(name, Path(versions), f"alembic_version_{name}")


CORE = Branch("datum", MIGRATIONS / "versions")


def _literal(node: ast.expr | None) -> object:
    try:
        return ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None


@lru_cache(maxsize=64)
def _revisions(versions: Path) -> dict[str, tuple[str, ...]]:
    """revision -> its down revisions, from the migration files' module-level assignments."""
    found: dict[str, tuple[str, ...]] = {}
    for path in sorted(versions.glob("*.py")):
        values: dict[str, object] = {}
        for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                values[node.targets[0].id] = _literal(node.value)
        revision = values.get("revision")
        if not isinstance(revision, str):
            continue
        down = values.get("down_revision")
        found[revision] = (down,) if isinstance(down, str) else tuple(down or ())  # type: ignore[arg-type]
    return found


def heads(branch: Branch) -> frozenset[str]:
    """The branch's newest revisions: those no other revision revises."""
    revisions = _revisions(branch.versions)
    parents = {p for downs in revisions.values() for p in downs}
    return frozenset(revisions) - parents


def current_revisions(conn: Connection, branch: Branch = CORE) -> frozenset[str] | None:
    """The revisions the store records for ``branch``, or None where Alembic never touched it."""
    if not sa.inspect(conn).has_table(branch.version_table):
        return None
    rows = conn.execute(sa.text(f"SELECT version_num FROM {branch.version_table}")).scalars()
    return frozenset(str(r) for r in rows)


@contextmanager
def _exclusive(engine: Engine, conn: Connection) -> Iterator[None]:
    """Serialise migrations between processes: an advisory lock on PostgreSQL, a file lock on SQLite."""
    if engine.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('datum-migrate'))"))
        yield
        return
    database = engine.url.database
    if not database or database == ":memory:":
        yield
        return
    with open(f"{database}.migrate-lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def migrate(engine: Engine, branches: Iterable[Branch] = (CORE,)) -> None:
    """Upgrade every branch in ``branches`` to all of its heads."""
    todo = list(branches)
    with engine.connect() as probe:
        todo = [b for b in todo if current_revisions(probe, b) != heads(b)]
    if not todo:
        return
    from alembic import command
    from alembic.config import Config

    for branch in todo:
        with engine.begin() as conn, _exclusive(engine, conn):
            revisions = current_revisions(conn, branch)
            if revisions == heads(branch):
                continue
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS))
            cfg.set_main_option("path_separator", "os")
            cfg.set_main_option("version_locations", str(branch.versions))
            cfg.attributes["connection"] = conn
            cfg.attributes["version_table"] = branch.version_table
            if branch == CORE and revisions is None and sa.inspect(conn).has_table("item_memory"):
                # Made by create_all before migrations existed: it is the baseline.
                command.stamp(cfg, BASELINE)
            command.upgrade(cfg, "heads")

"""Bring a store's tables to the current schema with Alembic, once, whoever gets there first.

The schema comes in *branches*: the framework's own tables (``CORE``) and each
plugin's (its own versions directory). Each branch records its revisions in a
version table of its own (``alembic_version`` for the core,
``alembic_version_<plugin>`` for a plugin), so a plugin uninstalled later never
makes Alembic refuse to upgrade the rest. A branch may have several heads
(two migrations written in parallel off one parent): it is current when its
revisions are exactly its scripts' heads, and it is upgraded to all of them.

Any number of processes may open or migrate one store at once (``datum serve``
replicas starting together, ``datum store migrate`` run from several hosts):
the upgrade runs under a lock that dies with its holder (a transaction-level
PostgreSQL advisory lock, ``flock`` beside a SQLite file), and whoever gets it
second finds the store current and does nothing. Opening a store that is
already current costs one small query per branch; heads are read from the
migration files without Alembic, which is imported only when there is
something to do, so ``datum`` starts fast.
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


@dataclass(frozen=True)
class Migrated:
    """What one ``migrate`` found and left: the store's revisions (every branch's) before and after."""

    before: frozenset[str]
    after: frozenset[str]

    @property
    def upgraded(self) -> bool:
        return self.before != self.after


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
    """The branch's newest revisions, read from its files: those no other revision revises."""
    revisions = _revisions(branch.versions)
    parents = {p for downs in revisions.values() for p in downs}
    return frozenset(revisions) - parents


# Every head of the framework's own branch: a store at exactly these is current without Alembic.
# Under the lock, the scripts' own heads decide (a test checks the two agree).
HEADS = heads(CORE)
HEAD = "0033_audit_seq_partial"


def current_revisions(conn: Connection, branch: Branch = CORE) -> frozenset[str]:
    """The revisions the store records for ``branch``; empty where Alembic never touched it."""
    if not sa.inspect(conn).has_table(branch.version_table):
        return frozenset()
    rows = conn.execute(sa.text(f"SELECT version_num FROM {branch.version_table}")).scalars()
    return frozenset(str(r) for r in rows)


@contextmanager
def _file_lock(database: str | None) -> Iterator[None]:
    """``flock`` on ``DATABASE.migrate-lock`` for the block (nothing for an in-memory database)."""
    if not database or database == ":memory:":
        yield
        return
    with open(f"{database}.migrate-lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def exclusive(engine: Engine) -> Iterator[Connection]:
    """A transaction that changes the schema while no other process does: held until it committed.

    PostgreSQL: an advisory lock of the transaction, released at commit,
    rollback or the end of the session. SQLite: ``flock`` on
    ``DATABASE.migrate-lock`` taken before the transaction begins and released
    after it ends (or when the process dies), so the next holder reads what
    this one committed.
    """
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('datum-migrate'))"))
            yield conn
        return
    with _file_lock(engine.url.database), engine.begin() as conn:
        yield conn


def _fast_heads(branch: Branch) -> frozenset[str]:
    return HEADS if branch == CORE else heads(branch)


def migrate(engine: Engine, branches: Iterable[Branch] = (CORE,)) -> Migrated:
    """Upgrade every branch in ``branches`` to every head of its scripts; nothing where it is there already.

    All of them under one lock, in one transaction: a process that waited for
    another finds everything current and says so (``before == after``).
    """
    wanted = list(branches)
    with engine.connect() as probe:
        found = {b: current_revisions(probe, b) for b in wanted}
    todo = [b for b in wanted if found[b] != _fast_heads(b)]
    if not todo:
        everything = frozenset().union(*found.values())
        return Migrated(everything, everything)
    from alembic import command
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    configs = {}
    for branch in todo:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.set_main_option("path_separator", "os")
        cfg.set_main_option("version_locations", str(branch.versions))
        configs[branch] = (cfg, frozenset(ScriptDirectory.from_config(cfg).get_heads()))
    with exclusive(engine) as conn:
        # Another process may have upgraded any of them while this one waited.
        found = {b: current_revisions(conn, b) for b in wanted}
        before = frozenset().union(*found.values())
        for branch, (cfg, scripts) in configs.items():
            if found[branch] == scripts:
                continue
            cfg.attributes["connection"] = conn
            cfg.attributes["version_table"] = branch.version_table
            if branch == CORE and not found[branch] and sa.inspect(conn).has_table("item_memory"):
                # Made by create_all before migrations existed: it is the baseline.
                command.stamp(cfg, BASELINE)
            command.upgrade(cfg, "heads")
            found[branch] = current_revisions(conn, branch)
    return Migrated(before, frozenset().union(*found.values()))

"""A reconciler's desired-state table (``DesiredTable``), and its writes: compare-and-set on the status that was read.

``UPDATE table SET status = new WHERE key = id AND status IN (expected)``: no
row changed means someone else moved it meanwhile, and it is left alone. A
reconciler's pass writes through ``PassContext.compare_and_set`` (fenced);
its CLI or routes call ``set_status`` in their own transaction.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from datum.core.findings import ErrorCode, Problem
from datum.store import Store

if TYPE_CHECKING:
    from datum.reconcile.coverage import CoverageSpec
    from datum.store.migrate import Branch


def set_status(
    conn: sa.Connection,
    table: sa.Table,
    key: str,
    status: str,
    expected: Collection[str],
    *,
    key_column: str = "name",
    status_column: str = "status",
    since_column: str | None = "updated_at",
    **values: Any,
) -> bool:
    """Move row ``key`` to ``status`` only from one of ``expected``; whether it moved."""
    stamp = {since_column: datetime.now(UTC)} if since_column else {}
    done = conn.execute(
        sa.update(table)
        .where(table.c[key_column] == key, table.c[status_column].in_(list(expected)))
        .values({status_column: status, **stamp, **values})
    )
    return bool(done.rowcount == 1)


class DesiredTable:
    """A plugin's desired-state table with statuses, and everything a reconciler, its CLI and its
    routes do with it: the table (``name`` key, the plugin's own columns, ``status``, ``created_at``,
    ``updated_at`` and the (status, updated_at) index coverage reads), its migration, the per-status
    counts and coverage, the work query, and the CRUD.

    Written once here so that two reconcilers never keep two copies of "read the rows the work query
    selects, and the names of the known rows it does not" or "ask for removal, else say why not".
    """

    def __init__(
        self,
        name: str,
        metadata: sa.MetaData,
        *columns: sa.Column[Any],
        kind: str,
        noun: str,
        work_query: Collection[str],
        terminal: Collection[str] = (),
        owned_by: Mapping[str, str] | None = None,
        branch: Branch | None = None,
        key_length: int = 63,
    ) -> None:
        from datum.store.types import UTCDateTime

        self.table = sa.Table(
            name,
            metadata,
            sa.Column("name", sa.String(key_length), primary_key=True),
            *columns,
            sa.Column("status", sa.String(32), nullable=False),
            sa.Column("created_at", UTCDateTime, nullable=False),
            sa.Column("updated_at", UTCDateTime, nullable=False),
            # the per-status counts are kept by triggers (``upgrade``): coverage reads those
            sa.Index(f"ix_{name}_status_updated_at", "status", "updated_at"),
        )
        self.kind, self.noun = kind, noun
        self.work_query = tuple(work_query)
        self.terminal = frozenset(terminal)
        self.owned_by = dict(owned_by or {})
        self.branch = branch

    # -- the migration and coverage ------------------------------------------------------

    def upgrade(self) -> None:
        """The table, its index and its per-status counts: call from the first migration of the
        plugin's own branch (``op`` is Alembic's; the rows already there are counted)."""
        from alembic import op

        from datum.store.status_counts import count_statuses

        self.table.create(op.get_bind())  # with its (status, updated_at) index
        count_statuses(self.table.name, status_column="status", since_column="updated_at")

    def downgrade(self) -> None:
        """Undo ``upgrade``: the counts' triggers, then the table."""
        from alembic import op

        from datum.store.status_counts import drop_status_counts

        drop_status_counts(self.table.name, status_column="status", since_column="updated_at")
        op.drop_table(self.table.name)

    def coverage(self, work_query: Collection[str] | None = None) -> CoverageSpec:
        """What coverage reads for ``work_query`` (the configured one, by default)."""
        from datum.core.coverage import CoverageDecl
        from datum.reconcile.coverage import CoverageSpec

        selected = frozenset(self.work_query if work_query is None else work_query)
        decl = CoverageDecl(kind=self.kind, selected=selected, terminal=self.terminal - selected, owned_by=self.owned_by)
        return CoverageSpec(decl, self.table, counted=True)

    # -- what a pass reads -----------------------------------------------------------------

    def work(self, conn: sa.Connection, work_query: Collection[str] | None = None) -> tuple[dict[str, dict[str, Any]], set[str]]:
        """The rows the work query selects, by name; and the names of the known rows it does not
        select (not terminal): what such a row names is not a stray, and must never be reaped.
        Coverage is what reports those rows as stranded."""
        selected = list(self.work_query if work_query is None else work_query)
        t = self.table
        desired = {r["name"]: dict(r) for r in conn.execute(sa.select(t).where(t.c.status.in_(selected))).mappings()}
        unselected = set(
            conn.execute(sa.select(t.c.name).where(t.c.status.not_in(selected), t.c.status.not_in(list(self.terminal)))).scalars()
        )
        return desired, unselected

    # -- the CRUD of the CLI and the routes ------------------------------------------------

    def _require(self, store: Store) -> None:
        if self.branch is not None:
            store.require(self.branch)

    def rows(self, store: Store) -> list[dict[str, Any]]:
        """Every row, by name."""
        self._require(store)
        with store.connect() as conn:
            return [dict(r) for r in conn.execute(sa.select(self.table).order_by(self.table.c.name)).mappings()]

    def status(self, store: Store, key: str) -> str | None:
        """The status of row ``key``, or None when there is none."""
        self._require(store)
        with store.connect() as conn:
            return self._status(conn, key)

    def _status(self, conn: sa.Connection, key: str) -> str | None:
        found = conn.execute(sa.select(self.table.c.status).where(self.table.c.name == key)).scalar()
        return None if found is None else str(found)

    def put(self, store: Store, key: str, status: str, **values: Any) -> None:
        """Ask for ``key`` as described, whatever its row said (insert, or replace its values)."""
        self._require(store)
        now = datetime.now(UTC)
        values = {**values, "status": status, "updated_at": now}
        with store.begin() as conn:
            done = conn.execute(sa.update(self.table).where(self.table.c.name == key).values(**values))
            if done.rowcount == 0:
                conn.execute(sa.insert(self.table).values(name=key, created_at=now, **values))

    def create(self, store: Store, key: str, status: str, **values: Any) -> str:
        """Ask for a new ``key`` in ``status``; a terminal row comes back; any other is a CONFLICT."""
        self._require(store)
        now = datetime.now(UTC)
        with store.begin() as conn:
            current = self._status(conn, key)
            if current is None:
                conn.execute(sa.insert(self.table).values(name=key, status=status, created_at=now, updated_at=now, **values))
            elif not (current in self.terminal and set_status(conn, self.table, key, status, self.terminal, created_at=now, **values)):
                raise Problem.one(ErrorCode.CONFLICT, f"{self.noun} {key!r} already exists (status {current})")
        return status

    def request(self, store: Store, key: str, status: str, expected: Collection[str]) -> str:
        """Move ``key`` to ``status`` (removal asked for) from one of ``expected``; the status it is
        in now. NOT_FOUND when there is no such row, or only a terminal one."""
        self._require(store)
        with store.begin() as conn:
            if set_status(conn, self.table, key, status, expected):
                return status
            current = self._status(conn, key)
        if current is None or current in self.terminal:
            raise Problem.one(ErrorCode.NOT_FOUND, f"no {self.noun} named {key!r}")
        return current

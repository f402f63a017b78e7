"""The ``pg_roles`` reconciler: roles of a target PostgreSQL converged to the ``pg_roles_desired`` table.

Desired: rows of ``pg_roles_desired`` (name, login, connection limit, member
of). Actual: the target's ``pg_roles`` whose names start with the configured
``prefix``; no statement ever names a role outside it. Restore creates a role,
align alters it (login, connection limit, memberships in roles of the
prefix), reap drops a role no row asks for, and a row in ``dropping`` asks for
its role to be dropped.

Statuses: ``active`` and ``dropping`` are this reconciler's work query;
``dropped`` is terminal; ``requested`` rows belong to the access review
(``ownedBy``), which moves them to ``active`` once approved. Any other status
found in the table is stranded: nothing will ever move it.

Safety: a role is dropped only after ``confirmation_ticks`` passes saw it
unwanted, within the breaker; PostgreSQL refuses to drop a role that still
owns objects or holds privileges, and that refusal is ``blocked_on_owner``
with PostgreSQL's own message. A role with an attribute Datum does not model
(superuser, createdb, createrole, replication, bypassrls, noinherit) is
``unexpected_value``: reported, never altered, never dropped. A row whose
role sits in a status the work query does not select is never reaped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import Field, field_validator

from datum.sdk import (
    BlockedOnOwner,
    Branch,
    DesiredTable,
    Direction,
    FieldError,
    PassContext,
    PermanentError,
    Reason,
    ReconcilerSettings,
    Store,
    SubstrateError,
    Waiting,
    invalid,
)

NAME = "pg_roles"
KIND = "role"
BRANCH = Branch.of_plugin(NAME, Path(__file__).parent / "migrations")

ACTIVE, DROPPING, DROPPED, REQUESTED = "active", "dropping", "dropped", "requested"
WORK_QUERY = (ACTIVE, DROPPING)
OWNED_BY = {REQUESTED: "access-review"}

metadata = sa.MetaData()
# The table (name, the role's attributes, status, created_at, updated_at; its counts kept by
# triggers, migration pg_roles_0002).
desired = DesiredTable(
    "pg_roles_desired",
    metadata,
    sa.Column("login", sa.Boolean, nullable=False),
    sa.Column("connection_limit", sa.Integer, nullable=False),
    sa.Column("member_of", sa.JSON, nullable=False),
    kind=KIND,
    noun="role",
    work_query=WORK_QUERY,
    terminal={DROPPED},
    owned_by=OWNED_BY,
    branch=BRANCH,
)
desired_roles = desired.table

_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# The role attributes Datum does not model, and the value it expects of each.
_UNMODELLED = {
    "rolsuper": False,
    "rolcreatedb": False,
    "rolcreaterole": False,
    "rolreplication": False,
    "rolbypassrls": False,
    "rolinherit": True,
}
# SQLSTATE 2BP01: dependent_objects_still_exist (the role owns objects or holds privileges).
_STILL_OWNS = "2BP01"


class PgRolesSettings(ReconcilerSettings):
    """The ``[reconcilers.pg_roles]`` section: the target server and the prefix of the roles Datum owns.

    Off unless enabled: without ``url`` there is nothing to converge.
    """

    enabled: bool = False
    url: str | None = Field(default=None, description="The target PostgreSQL, postgresql://user@host/db.")
    prefix: str = Field(default="datum_", min_length=2, max_length=30)

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not _IDENT.match(value):
            raise ValueError("a lower-case identifier prefix: a-z, 0-9 and '_', not starting with a digit")
        return value


def check_name(name: str, prefix: str | None = None) -> str:
    """A role name Datum may manage: a lower-case identifier, within ``prefix`` when one is given."""
    if not _IDENT.match(name):
        raise invalid([FieldError("name", "a lower-case identifier of at most 63 characters")], f"role name {name!r} is not valid")
    if prefix is not None and not name.startswith(prefix):
        raise invalid([FieldError("name", f"must start with the prefix {prefix!r}")], f"role {name!r} is outside the prefix")
    return name


# -- desired state -----------------------------------------------------------------


def put(
    store: Store,
    name: str,
    *,
    login: bool = False,
    connection_limit: int = -1,
    member_of: Sequence[str] = (),
    status: str = ACTIVE,
    prefix: str | None = None,
) -> None:
    """Ask for a role as described (insert or replace its row)."""
    check_name(name, prefix)
    for other in member_of:
        check_name(other, prefix)
    if connection_limit < -1:
        raise invalid([FieldError("connection_limit", "-1 (no limit) or more")])
    desired.put(store, name, status, login=login, connection_limit=connection_limit, member_of=sorted(set(member_of)))


def drop(store: Store, name: str) -> str:
    """Ask for a role to be dropped; the reconciler drops it (PostgreSQL permitting)."""
    return desired.request(store, name, DROPPING, {ACTIVE, REQUESTED})


def rows(store: Store) -> list[dict[str, Any]]:
    """Every desired role, by name."""
    return desired.rows(store)


# -- substrate ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Role:
    """A role as the target's ``pg_roles`` shows it (memberships within the prefix only)."""

    login: bool
    connection_limit: int
    member_of: tuple[str, ...]
    unmodelled: tuple[str, ...]  # attributes set to what Datum does not model


_OBSERVE = """
SELECT r.rolname, r.rolcanlogin, r.rolconnlimit, r.rolsuper, r.rolcreatedb, r.rolcreaterole,
       r.rolreplication, r.rolbypassrls, r.rolinherit,
       ARRAY(SELECT g.rolname FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
             WHERE m.member = r.oid AND left(g.rolname, length(%(prefix)s)) = %(prefix)s
             ORDER BY g.rolname) AS member_of
FROM pg_roles r
WHERE left(r.rolname, length(%(prefix)s)) = %(prefix)s
"""


class Target:
    """The target PostgreSQL: reading its roles of the prefix, and the statements that change them."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url.replace("postgresql+psycopg://", "postgresql://", 1)
        self.prefix = prefix

    @contextmanager
    def connect(self) -> Iterator[Any]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
            yield conn

    def observe(self) -> dict[str, Role]:
        """Every role of the prefix. Raises ``SubstrateError`` when the server cannot be read."""
        import psycopg

        try:
            with self.connect() as conn:
                found = conn.execute(_OBSERVE, {"prefix": self.prefix}).fetchall()
        except psycopg.Error as exc:
            raise SubstrateError(f"cannot read pg_roles of the target: {_message(exc)}") from exc
        roles = {}
        for name, login, limit, sup, createdb, createrole, repl, bypass, inherit, member_of in found:
            if not name.startswith(self.prefix):  # never trust a filter with someone else's roles
                continue
            values = {
                "rolsuper": sup, "rolcreatedb": createdb, "rolcreaterole": createrole,
                "rolreplication": repl, "rolbypassrls": bypass, "rolinherit": inherit,
            }
            odd = tuple(k.removeprefix("rol") for k, want in _UNMODELLED.items() if values[k] != want)
            roles[name] = Role(bool(login), int(limit), tuple(member_of), odd)
        return roles

    def execute(self, *statements: Any) -> None:
        """Run statements in one transaction on the target (every role in them was named through ``ident``)."""
        with self.connect() as conn, conn.transaction():
            for statement in statements:
                conn.execute(statement)

    def ident(self, name: str) -> Any:
        """A quoted identifier for a role of the prefix; anything else is refused before SQL is built."""
        from psycopg import sql

        if not name.startswith(self.prefix) or not _IDENT.match(name):
            raise PermanentError(f"refusing to name role {name!r}: it is outside the prefix {self.prefix!r}")
        return sql.Identifier(name)


def _message(exc: BaseException) -> str:
    """PostgreSQL's own words: the primary message and, when it gives one, the detail."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None)
    if not primary:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    detail = getattr(diag, "message_detail", None)
    return f"{primary} ({detail})" if detail else primary


def describe_desired(row: dict[str, Any]) -> str:
    if row["status"] == DROPPING:
        return "absent (status dropping)"
    return _describe(bool(row["login"]), int(row["connection_limit"]), row["member_of"])


def describe_actual(role: Role) -> str:
    text = _describe(role.login, role.connection_limit, role.member_of)
    return text + (f", also {' '.join(role.unmodelled)}" if role.unmodelled else "")


def _describe(login: bool, limit: int, member_of: Sequence[str]) -> str:
    parts = ["login" if login else "nologin", f"connection limit {limit}"]
    if member_of:
        parts.append("member of " + ", ".join(sorted(member_of)))
    return ", ".join(parts)


def same(row: dict[str, Any], role: Role) -> bool:
    """Whether the role is what the row asks for, and nothing Datum does not model."""
    return (
        not role.unmodelled
        and bool(row["login"]) == role.login
        and int(row["connection_limit"]) == role.connection_limit
        and sorted(row["member_of"]) == sorted(role.member_of)
    )


# -- the reconciler ----------------------------------------------------------------


class PgRolesReconciler:
    """Converges the target's roles of the prefix to ``pg_roles_desired``."""

    name = NAME
    items_reported = True

    def __init__(self, settings: PgRolesSettings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self.prefix = settings.prefix
        self.coverage = [desired.coverage()]
        self._ctx: PassContext | None = None
        store.require(BRANCH)

    def target(self) -> Target:
        if not self.settings.url:
            raise SubstrateError("no target PostgreSQL configured ([reconcilers.pg_roles] url)")
        return Target(self.settings.url, self.prefix)

    def run(self, ctx: PassContext) -> None:
        target = self.target()
        with self.store.connect() as conn:
            # A role whose row sits in an unselected status is known, not a stray: never reaped.
            selected, unselected = desired.work(conn)
        wanted = {name: row for name, row in selected.items() if name.startswith(self.prefix)}
        actual = {k: v for k, v in target.observe().items() if k not in unselected}
        self._ctx = ctx
        try:
            ctx.converge(
                KIND,
                wanted,
                actual,
                lambda direction, name, row, role: self.apply(target, direction, name, row, role),
                equal=same,
                tombstone=lambda row: row["status"] == DROPPING,
                describe=describe_desired,
                describe_actual=describe_actual,
                unsettled=lambda row: row["status"] == DROPPING,
                settle=self.settle,
            )
        finally:
            self._ctx = None

    def apply(
        self, target: Target, direction: Direction, name: str, row: dict[str, Any] | None, role: Role | None
    ) -> None:
        if role is not None and role.unmodelled:
            raise Waiting(
                Reason.UNEXPECTED_VALUE,
                f"role {name} has {', '.join(role.unmodelled)}, which Datum does not model; left alone",
            )
        if row is None or row["status"] == DROPPING:
            self._drop(target, name)
            if row is not None:
                self._status(name, row["status"], DROPPED)
            return
        outside = [g for g in row["member_of"] if not g.startswith(self.prefix)]
        if outside:
            raise Waiting(
                "pg_roles.membership_outside_prefix",
                f"asked to be a member of {', '.join(sorted(outside))}, outside the prefix {self.prefix!r}",
            )
        if role is None:
            self._create(target, name, row)
        else:
            self._alter(target, name, row, role)

    def _options(self, row: dict[str, Any]) -> Any:
        from psycopg import sql

        login = sql.SQL("LOGIN" if row["login"] else "NOLOGIN")
        return sql.SQL("{} CONNECTION LIMIT {}").format(login, sql.Literal(int(row["connection_limit"])))

    def _create(self, target: Target, name: str, row: dict[str, Any]) -> None:
        from psycopg import sql

        me = target.ident(name)
        statements = [sql.SQL("CREATE ROLE {} WITH {}").format(me, self._options(row))]
        statements += [sql.SQL("GRANT {} TO {}").format(target.ident(g), me) for g in sorted(row["member_of"])]
        self._run(target, statements)

    def _alter(self, target: Target, name: str, row: dict[str, Any], role: Role) -> None:
        from psycopg import sql

        me = target.ident(name)
        want, have = set(row["member_of"]), set(role.member_of)
        statements = [sql.SQL("ALTER ROLE {} WITH {}").format(me, self._options(row))]
        statements += [sql.SQL("GRANT {} TO {}").format(target.ident(g), me) for g in sorted(want - have)]
        statements += [sql.SQL("REVOKE {} FROM {}").format(target.ident(g), me) for g in sorted(have - want)]
        self._run(target, statements)

    def _drop(self, target: Target, name: str) -> None:
        """DROP ROLE: PostgreSQL refuses while the role owns objects or holds privileges; that is the owner's move."""
        import psycopg
        from psycopg import sql

        try:
            target.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(target.ident(name)))
        except psycopg.Error as exc:
            if getattr(exc, "sqlstate", None) == _STILL_OWNS:
                raise BlockedOnOwner(_message(exc)) from exc
            raise RuntimeError(_message(exc)) from exc

    def _run(self, target: Target, statements: list[Any]) -> None:
        import psycopg

        try:
            target.execute(*statements)
        except psycopg.Error as exc:
            raise RuntimeError(_message(exc)) from exc

    def settle(self, name: str, row: dict[str, Any], role: Role | None) -> None:
        """A ``dropping`` row whose role has been gone for ``confirmation_ticks`` passes is ``dropped``."""
        self._status(name, row["status"], DROPPED)

    def _status(self, name: str, read: str, status: str) -> None:
        """Compare-and-set on the status this pass read, in the pass's fenced transaction."""
        if self._ctx is not None:
            self._ctx.compare_and_set(desired_roles, name, read, status)

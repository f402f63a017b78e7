"""The pg_roles reconciler against the machine's real PostgreSQL, through the real CLI.

Each test gets its own database (the store and the target both) and its own
role prefix; roles are cluster-wide, so every role of the prefix is dropped
afterwards, and a role outside the prefix is created to prove it is never touched.
"""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from psycopg import sql

pytestmark = pytest.mark.postgres


@pytest.fixture
def target(pg_database):
    """A per-test database URL and role prefix; every role of the prefix is dropped afterwards."""
    url = pg_database.replace("postgresql+psycopg://", "postgresql://", 1)
    prefix = f"dt{uuid.uuid4().hex[:8]}_"
    try:
        yield url, prefix
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            names = [r[0] for r in conn.execute(
                "SELECT rolname FROM pg_roles WHERE left(rolname, length(%s)) = %s", (prefix, prefix))]
            for name in names:
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


class Datum:
    def __init__(self, datum_cli, cfg: str) -> None:
        self.cli, self.cfg = datum_cli, cfg

    def __call__(self, *args: str) -> tuple[int, str, str]:
        return self.cli(*args, "--config", self.cfg)

    def passes(self, n: int) -> None:
        code, out, err = self("reconcile", "pg_roles", "--passes", str(n))
        assert code == 0, out + err

    def report(self) -> dict:
        code, out, err = self("drift", "pg_roles", "--json")
        assert code == 0, err
        return json.loads(out)

    def items(self) -> dict[str, dict]:
        return {i["id"]: i for i in self.report()["items"]}

    def statuses(self) -> dict[str, str]:
        _, out, _ = self("pg-role", "list", "--json")
        return {r["name"]: r["status"] for r in json.loads(out)}


@pytest.fixture
def datum(tmp_path, target, datum_cli):
    url, prefix = target
    cfg = tmp_path / "datum.toml"
    cfg.write_text(
        f'store = "{url}"\n[reconcilers.pg_roles]\nenabled = true\nurl = "{url}"\nprefix = "{prefix}"\n'
        "confirmation_ticks = 2\nbreaker = { reap = { count = 10, fraction = 1 } }\n"
    )
    return Datum(datum_cli, str(cfg))


def roles(url: str, prefix: str) -> dict[str, tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT r.rolname, r.rolcanlogin, r.rolconnlimit, ARRAY(SELECT g.rolname FROM pg_auth_members m"
            " JOIN pg_roles g ON g.oid = m.roleid WHERE m.member = r.oid ORDER BY 1)"
            " FROM pg_roles r WHERE left(r.rolname, length(%s)) = %s", (prefix, prefix)).fetchall()
    return {r[0]: (r[1], r[2], list(r[3])) for r in rows}


def sql_as_admin(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for s in statements:
            conn.execute(s)


def test_restore_creates_align_alters_and_only_after_confirmation(datum, target):
    url, p = target
    assert datum("pg-role", "set", f"{p}readers")[0] == 0
    assert datum("pg-role", "set", f"{p}app", "--login", "--connection-limit", "5", "--member-of", f"{p}readers")[0] == 0
    datum.passes(1)
    assert roles(url, p) == {}  # one read is never enough
    assert {i["reason"] for i in datum.items().values()} == {"awaiting_confirmation"}
    datum.passes(1)
    assert roles(url, p) == {f"{p}readers": (False, -1, []), f"{p}app": (True, 5, [f"{p}readers"])}
    # Changed by hand: aligned back, after confirmation.
    sql_as_admin(url, f'ALTER ROLE "{p}app" NOLOGIN CONNECTION LIMIT 1', f'REVOKE "{p}readers" FROM "{p}app"')
    datum.passes(1)
    item = datum.items()[f"{p}app"]
    assert (item["direction"], item["reason"]) == ("align", "awaiting_confirmation")
    assert item["actual"] == "nologin, connection limit 1"
    datum.passes(1)
    assert roles(url, p)[f"{p}app"] == (True, 5, [f"{p}readers"])
    datum.passes(1)
    report = datum.report()
    assert report["health"] == "ok" and report["items"] == [] and report["itemsReported"] is True


def test_reap_drops_a_stray_of_the_prefix_and_never_a_role_outside_it(datum, target):
    url, p = target
    outsider = f"{p[:-1]}x_outsider"  # shares the letters, not the prefix
    assert not outsider.startswith(p)
    sql_as_admin(url, f'CREATE ROLE "{p}stray"', f'CREATE ROLE "{p}kept"', f'CREATE ROLE "{outsider}"')
    try:
        datum("pg-role", "set", f"{p}kept")
        datum.passes(2)
        assert set(roles(url, p)) == {f"{p}kept"}
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (outsider,)).fetchone()
    finally:
        sql_as_admin(url, f'DROP ROLE IF EXISTS "{outsider}"')


def test_a_drop_refused_because_the_role_owns_objects_waits_on_its_owner_with_postgres_words(datum, target):
    url, p = target
    datum("pg-role", "set", f"{p}owner")
    datum.passes(2)
    sql_as_admin(url, 'CREATE TABLE owned_thing (id int)', f'ALTER TABLE owned_thing OWNER TO "{p}owner"')
    assert datum("pg-role", "drop", f"{p}owner")[1].strip().endswith("dropping")
    datum.passes(2)
    item = datum.items()[f"{p}owner"]
    assert item["reason"] == "blocked_on_owner"
    assert 'role "' + f"{p}owner" + '" cannot be dropped because some objects depend on it' in item["lastErr"]
    assert "owned_thing" in item["lastErr"]  # PostgreSQL's detail names what it owns
    report = datum.report()
    assert (report["blocked"], report["drift"]) == (1, 0)
    assert f"{p}owner" in roles(url, p)
    # The owner moves the table away: the role is dropped, then the row settles as dropped.
    sql_as_admin(url, "DROP TABLE owned_thing")
    datum.passes(1)
    assert f"{p}owner" not in roles(url, p)
    datum.passes(2)
    assert datum.statuses()[f"{p}owner"] == "dropped"


def test_a_role_with_attributes_datum_does_not_model_is_unexpected_value_and_left_alone(datum, target):
    url, p = target
    sql_as_admin(url, f'CREATE ROLE "{p}odd" CREATEDB', f'CREATE ROLE "{p}odd_stray" CREATEROLE')
    datum("pg-role", "set", f"{p}odd")
    datum.passes(3)
    items = datum.items()
    assert items[f"{p}odd"]["reason"] == "unexpected_value"
    assert "createdb" in items[f"{p}odd"]["lastErr"]
    assert items[f"{p}odd_stray"]["reason"] == "unexpected_value"  # never reaped either
    assert set(roles(url, p)) == {f"{p}odd", f"{p}odd_stray"}


def test_a_membership_outside_the_prefix_is_the_plugins_own_reason(datum, target):
    from datum.reconcilers.pg_roles import reconciler

    url, p = target
    code, _, err = datum("pg-role", "set", f"{p}app", "--member-of", "pg_read_all_data")
    assert code == 65 and "outside the prefix" in err  # refused where it is written
    # Written by another component straight into the table: reported, nothing granted.
    from datum.store import open_store

    store = open_store(url)
    reconciler.put(store, f"{p}app", member_of=["pg_read_all_data"])
    store.dispose()
    datum.passes(2)
    item = datum.items()[f"{p}app"]
    assert item["reason"] == "pg_roles.membership_outside_prefix"
    assert roles(url, p) == {}


def test_coverage_tells_owned_elsewhere_from_stranded(datum, target):
    from datum.reconcilers.pg_roles import reconciler
    from datum.store import open_store

    url, p = target
    datum("pg-role", "set", f"{p}pending", "--status", "requested")
    store = open_store(url)
    reconciler.put(store, f"{p}frozen", status="frozen")  # a status nothing drives
    store.dispose()
    sql_as_admin(url, f'CREATE ROLE "{p}pending"')  # its role exists already: known, never reaped
    datum.passes(2)
    report = datum.report()
    coverage = {c["status"]: c for c in report["coverage"]}
    assert coverage["requested"]["ownedBy"] == "access-review" and not coverage["requested"]["stranded"]
    assert coverage["frozen"]["stranded"] and "ownedBy" not in coverage["frozen"]
    assert coverage["dropped"]["terminal"] and coverage["active"]["selected"]
    assert f"{p}pending" in roles(url, p) and report["items"] == []
    _, out, _ = datum("reconcilers", "--json")
    assert {r["name"]: r["stranded"] for r in json.loads(out)}["pg_roles"] == 1


def test_an_unreachable_target_fails_the_pass_and_reaps_nothing(datum, target, tmp_path):
    url, p = target
    sql_as_admin(url, f'CREATE ROLE "{p}stray"')
    datum.passes(1)
    bad = tmp_path / "bad.toml"
    bad.write_text(open(datum.cfg).read().replace(f'url = "{url}"', 'url = "postgresql://postgres@127.0.0.1:1/none"'))
    datum.cfg = str(bad)
    code, out, _ = datum("reconcile", "pg_roles", "--passes", "3")
    assert code == 4 and "cannot read pg_roles of the target" in out
    assert datum.report()["health"] == "failing"
    assert f"{p}stray" in roles(url, p)

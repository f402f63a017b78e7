"""``datum pg-role set|drop|list``: desired state of the pg_roles reconciler."""

from __future__ import annotations

import json

import click

from datum.sdk.cli import config_option, json_option, wire


@click.group(name="pg-role")
def pg_role() -> None:
    """Ask for PostgreSQL roles (within the configured prefix) to exist as described, or to be dropped."""


def _prefix(w) -> str:  # type: ignore[no-untyped-def]
    return str(w.registry.settings(w.settings, "pg_roles").prefix)


@pg_role.command(name="set")
@click.argument("name")
@click.option("--login/--no-login", default=False, show_default=True)
@click.option("--connection-limit", type=int, default=-1, show_default=True, help="-1: no limit.")
@click.option("--member-of", multiple=True, help="A role of the prefix this one is a member of (repeatable).")
@click.option(
    "--status", type=click.Choice(["active", "requested"]), default="active", show_default=True,
    help="requested: the access review moves it to active once approved.",
)
@config_option
@json_option
def set_(name: str, login: bool, connection_limit: int, member_of: tuple[str, ...], status: str,
         config: str | None, as_json: bool) -> None:
    """Ask for role NAME to exist as described."""
    from datum.reconcilers.pg_roles import reconciler

    w = wire(config)
    reconciler.put(w.store, name, login=login, connection_limit=connection_limit, member_of=member_of,
                   status=status, prefix=_prefix(w))
    click.echo(json.dumps({"name": name, "status": status}) if as_json else f"role {name}: {status}")


@pg_role.command()
@click.argument("name")
@config_option
@json_option
def drop(name: str, config: str | None, as_json: bool) -> None:
    """Ask for role NAME to be dropped (PostgreSQL refuses while it owns objects: it waits on its owner)."""
    from datum.reconcilers.pg_roles import reconciler

    status = reconciler.drop(wire(config).store, name)
    click.echo(json.dumps({"name": name, "status": status}) if as_json else f"role {name}: {status}")


@pg_role.command(name="list")
@config_option
@json_option
def list_(config: str | None, as_json: bool) -> None:
    """List every desired role and its status."""
    from datum.reconcilers.pg_roles import reconciler

    found = reconciler.rows(wire(config).store)
    if as_json:
        keys = ("name", "login", "connection_limit", "member_of", "status")
        click.echo(json.dumps([{k: r[k] for k in keys} for r in found], indent=2))
        return
    for r in found:
        click.echo(f"{r['name']}: {r['status']}, {reconciler.describe_desired(r)}")

"""``datum bucket create|delete|list``: desired state of the buckets example reconciler."""

from __future__ import annotations

import json

import click

from datum.sdk.cli import config_option, json_option, wide_option, wire


@click.group()
def bucket() -> None:
    """Ask for buckets to exist or to be deleted; the reconciler does the rest."""


@bucket.command()
@click.argument("name")
@config_option
@json_option
def create(name: str, config: str | None, as_json: bool) -> None:
    """Ask for bucket NAME to exist."""
    from datum.reconcilers.buckets import reconciler as buckets

    status = buckets.create(wire(config).store, name)
    click.echo(json.dumps({"name": name, "status": status}) if as_json else f"bucket {name}: {status}")


@bucket.command()
@click.argument("name")
@config_option
@json_option
def delete(name: str, config: str | None, as_json: bool) -> None:
    """Ask for bucket NAME to be deleted once it is empty."""
    from datum.reconcilers.buckets import reconciler as buckets

    status = buckets.delete(wire(config).store, name)
    click.echo(json.dumps({"name": name, "status": status}) if as_json else f"bucket {name}: {status}")


@bucket.command(name="list")
@config_option
@json_option
@wide_option
def list_(config: str | None, as_json: bool, wide: bool) -> None:
    """List every bucket and its status."""
    from datum.reconcilers.buckets import reconciler as buckets

    rows = buckets.rows(wire(config).store)
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "name": r["name"],
                        "status": r["status"],
                        "createdAt": r["created_at"].isoformat(),
                        "updatedAt": r["updated_at"].isoformat(),
                    }
                    for r in rows
                ],
                indent=2,
            )
        )
        return
    from datetime import UTC, datetime

    from datum.sdk.cli import Times, console, table, text

    when = Times(datetime.now(UTC), wide)
    shown = table()
    for col in ("name", "status", "created", "updated"):
        shown.add_column(col, overflow="fold")
    for r in rows:
        shown.add_row(text(r["name"]), text(r["status"]), when(r["created_at"]), when(r["updated_at"]))
    console(wide).print(shown)

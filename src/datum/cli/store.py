"""``datum store migrate``: bring the configured store's schema to the current revisions, and say so."""

from __future__ import annotations

import click

from datum.cli.common import config_option


@click.group()
def store() -> None:
    """The server's store: its schema."""


@store.command()
@config_option
def migrate(config: str | None) -> None:
    """Upgrade the store to every migration head, the plugins' branches included; safe to run from several replicas at once."""
    from datum.config import load_settings
    from datum.plugins import load
    from datum.store import open_store

    settings = load_settings(config)
    opened = open_store(settings.store_url, lock_wait=settings.host.lock_wait, branches=load().branches())
    try:
        done = opened.migrated
        after = ", ".join(sorted(done.after)) if done is not None else "?"
        if done is not None and done.upgraded:
            before = ", ".join(sorted(done.before)) or "empty"
            click.echo(f"store {opened.name}: upgraded from {before} to {after}")
        else:
            click.echo(f"store {opened.name}: already at {after}")
    finally:
        opened.dispose()

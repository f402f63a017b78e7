"""``datum store migrate``: bring the configured store's schema to the current revisions, and say so."""

from __future__ import annotations

import json

import click

from datum.cli.common import config_option, json_option


@click.group()
def store() -> None:
    """The server's store: its schema, and the per-status counts its triggers keep."""


@store.command()
@config_option
@json_option
def migrate(config: str | None, as_json: bool) -> None:
    """Upgrade the store to every migration head, the plugins' branches included; safe to run from several replicas at once.

    With --json: `store` (its name, never a password), `upgraded`, and the revisions `before` and `after`.
    """
    from datum.config import load_settings
    from datum.plugins import load
    from datum.store import open_store

    settings = load_settings(config)
    opened = open_store(settings.store_url, lock_wait=settings.host.lock_wait, branches=load().branches())
    try:
        done = opened.migrated
        if as_json:
            click.echo(json.dumps({
                "store": opened.name,
                "upgraded": bool(done is not None and done.upgraded),
                "before": sorted(done.before) if done is not None else None,
                "after": sorted(done.after) if done is not None else None,
            }, indent=2))
            return
        after = ", ".join(sorted(done.after)) if done is not None else "?"
        if done is not None and done.upgraded:
            before = ", ".join(sorted(done.before)) or "empty"
            click.echo(f"store {opened.name}: upgraded from {before} to {after}")
        else:
            click.echo(f"store {opened.name}: already at {after}")
    finally:
        opened.dispose()


@store.command()
@config_option
@json_option
def recount(config: str | None, as_json: bool) -> None:
    """Count the hosts by state, and every counted desired-state table's rows per status, again; correct the kept counts.

    The repair after writes their triggers did not see (a REPLACE from a SQLite
    connection without recursive_triggers, triggers disabled); says what was
    wrong. Safe beside running servers: each table's writers wait for it.

    With --json: one object per counted table, `reconciler` (null for the fleet's `hosts`), `table` and
    `corrected` (status -> the count kept and the true one; empty when the counts were right).
    """
    from datum.cli.common import wire
    from datum.reconcile.registry import declared_coverage
    from datum.store import group_counts as by_group
    from datum.store.hosts import BY_REVISION, REVISION_COUNTS
    from datum.store.status_counts import recount as recount_table

    w = wire(config)
    found: list[dict[str, object]] = []
    def again(owner: str | None, table: str, column: str, counts: str | None = None, by: dict[str, str] | None = None) -> None:
        wrong = recount_table(w.store.engine, table, column, counts, by)
        table = counts or table
        found.append({
            "reconciler": owner, "table": table,
            "corrected": {status: {"kept": kept, "true": true} for status, (kept, true) in wrong.items()},
        })
        if as_json:
            return
        said = f"{owner}: {table}" if owner else table
        if not wrong:
            click.echo(f"{said}: the counts were right")
        for status, (kept, true) in wrong.items():
            click.echo(f"{said}: {status} was counted {kept}, is {true}: corrected")

    try:
        again(None, "hosts", "state")  # the fleet's counts by state (migration 0014_host_counts)
        again(None, "hosts", "state", REVISION_COUNTS, BY_REVISION)  # by revision and state (0017_revision_counts)
        again(None, "hosts", "state", by_group.TABLE, by_group.BY)  # by group and state (0018_host_groups)
        for name in w.registry:
            reconciler, _own = w.registry.build(w.settings, name, w.store)
            for spec in declared_coverage(reconciler) or ():
                if spec.counted:
                    again(name, spec.table.name, spec.status_column)
    finally:
        w.store.dispose()
    if as_json:
        click.echo(json.dumps(found, indent=2))

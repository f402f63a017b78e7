"""``datum rollout status``: per revision of the fleet's manifests, how many hosts run it, converged or failed."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from datum.cli.common import config_option, json_option, wide_option, wire


@click.group()
def rollout() -> None:
    """The fleet's manifests by revision: which hosts run which, and how they fare."""


@rollout.command()
@config_option
@json_option
@wide_option
def status(config: str | None, as_json: bool, wide: bool) -> None:
    """Per revision of `[fleet] manifests`, newest first: how many hosts run it, converged, failed, other.

    A revision is one state of the directory: its git commit (`<commit>+dirty.<hex>` with uncommitted
    changes), else `sha256:` of its files. The current one (marked `*`) is the directory's revision now,
    as this configuration reads it; first seen is when a server first served it. With --json: as
    GET /v1/revisions answers it.
    """
    from datum.api.routes.revisions import revision_list
    from datum.cli import render
    from datum.fleet.revision import revision
    from datum.fleet.rollout import status as rollout_status

    w = wire(config)
    now = datetime.now(UTC)
    directory = w.settings.fleet.manifests
    current = revision(directory) if directory is not None else None
    found = revision_list(rollout_status(w.store, w.settings.fleet.stale_after, now, current))
    if as_json:
        click.echo(json.dumps(found.dump(), indent=2))
        return
    out = render.console(wide)
    render.revisions(found, out, render.Times(now, wide))

"""``datum hosts``: the fleet's host listing from the store, a page at a time, as ``GET /v1/hosts`` gives it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from datum.cli.common import config_option, json_option, wire
from datum.core.vocab import HostState


@click.command()
@click.option("--state", "state", type=click.Choice([s.value for s in HostState]), default=None,
              help="Only the hosts that read this state (a host whose agent fell silent reads unknown).")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="Hosts per page.")
@click.option("--cursor", default=None, help="The next page: the cursor the previous page printed.")
@config_option
@json_option
def hosts(state: str | None, limit: int, cursor: str | None, config: str | None, as_json: bool) -> None:
    """List the fleet's hosts by name, a page at a time, with every state's count."""
    from datum.api.models import host_list
    from datum.core.findings import FieldError, invalid
    from datum.fleet.listing import host_after, page

    try:
        after = host_after(cursor) if cursor is not None else None
    except ValueError as exc:
        raise invalid([FieldError("--cursor", str(exc))], "the cursor is not one of this listing") from exc
    w = wire(config)
    found = page(w.store, w.settings.fleet.stale_after, datetime.now(UTC), state=state, after=after, limit=limit)
    listing = host_list(found)
    if as_json:
        click.echo(json.dumps(listing.dump(), indent=2))
        return
    click.echo("  ".join(f"{s} {n}" for s, n in found.counts.items()) + f"  (total {listing.total})")
    for h in listing.hosts:
        last = h.updated_at.strftime("%Y-%m-%d %H:%M:%S UTC") if h.updated_at else "(stored at an unknown time)"
        click.echo(f"{h.host}  {h.state.value}  {last}" + (f"  {h.reason}" if h.reason else ""))
    if listing.next:
        more = f" --state {state}" if state else ""
        click.echo(f"next page: datum hosts{more} --limit {limit} --cursor {listing.next}")

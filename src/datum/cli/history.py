"""``datum history HOST`` and ``datum events``: the pass archive from the store, or a server's API (``--server``).

The same pages as ``GET /v1/hosts/{host}/passes`` and ``GET /v1/events`` (``datum.fleet.history``), the same
JSON with ``--json`` (the API's models), tables otherwise. ``--since``/``--until`` take a duration back from
now (``1h``, ``1d``) or a time (RFC 3339; UTC when it has no offset).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from datum.cli.common import config_option, json_option, wide_option, wire
from datum.cli.remote import Server, server_options
from datum.core.vocab import Action, HostState, ResourceState


def _when(value: str | None, option: str, now: datetime) -> datetime | None:
    """``--since``/``--until``: a duration back from ``now`` or a time; a finding at ``option`` when neither."""
    if value is None:
        return None
    from datum.config import parse_duration
    from datum.core.findings import FieldError, invalid

    try:
        return now - parse_duration(value)
    except ValueError:
        pass
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise invalid(
            [FieldError(option, "a duration back from now ('1h', '1d') or a time ('2026-11-01T12:00:00Z')")],
            f"{option} is neither a duration nor a time",
        ) from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _after(cursor: str | None):  # type: ignore[no-untyped-def]
    from datum.core.findings import FieldError, invalid
    from datum.fleet.history import position

    try:
        return position(cursor) if cursor is not None else None
    except ValueError as exc:
        raise invalid([FieldError("--cursor", str(exc))], "the cursor is not one of this listing") from exc


def _window(since: str | None, until: str | None, now: datetime):  # type: ignore[no-untyped-def]
    from datum.fleet.history import Window

    return Window(_when(since, "--since", now), _when(until, "--until", now))


_SINCE = "Only what finished since: a duration back from now (1h, 1d) or a time (RFC 3339)."
_UNTIL = "Only what finished before: a duration back from now or a time."


@click.command()
@click.argument("host")
@click.option("--since", default=None, help=_SINCE)
@click.option("--until", default=None, help=_UNTIL)
@click.option("--state", type=click.Choice([s.value for s in HostState]), default=None,
              help="Only the passes that reported this host state.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="Passes per page.")
@click.option("--cursor", default=None, help="The next page: the cursor the previous page printed.")
@config_option
@server_options
@json_option
@wide_option
def history(
    host: str, since: str | None, until: str | None, state: str | None, limit: int, cursor: str | None,
    config: str | None, remote: Server | None, as_json: bool, wide: bool,
) -> None:
    """A host's kept passes, newest first: when the host finished each, the state it reported, its
    resources, and when the server received it (kept [server] retention long, every pass).

    --json: the page as GET /v1/hosts/HOST/passes answers it, its cursor in `next`.
    """
    import urllib.parse

    from datum.api.models import PassList
    from datum.cli import render
    from datum.fleet.history import passes_page

    now = datetime.now(UTC)
    window, after = _window(since, until, now), _after(cursor)
    if remote is not None:
        page = PassList.model_validate(remote.get(
            f"/v1/hosts/{urllib.parse.quote(host, safe='')}/passes", since=window.since, until=window.until,
            state=state, limit=limit, cursor=cursor,
        ))
    else:
        with wire(config) as w:
            found = passes_page(w.store, host, window, state=state, after=after, limit=limit)
        page = PassList.model_validate({"passes": found.rows, "next": found.next})
    if as_json:
        click.echo(json.dumps(page.dump(), indent=2))
        return
    out = render.console(wide)
    render.passes(page.passes, out, render.Times(now, wide))
    if page.next:
        click.echo(f"next page: datum history {host} --limit {limit} --cursor {page.next}"
                   + (f" --since {since}" if since else "") + (f" --state {state}" if state else ""))


@click.command()
@click.option("--since", default=None, help=_SINCE)
@click.option("--until", default=None, help=_UNTIL)
@click.option("--host", default=None, help="Only this host's.")
@click.option("--resource", default=None, help="Only this resource's (Type[name]).")
@click.option("--type", "type_", default=None, help="Only resources of this type (File, Package, ...).")
@click.option("--action", type=click.Choice([a.value for a in Action]), default=None,
              help="Only resources the plan meant to do this to.")
@click.option("--state", type=click.Choice([s.value for s in ResourceState]), default=None,
              help="Only resources that reached this state.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="Events per page.")
@click.option("--cursor", default=None, help="The next page: the cursor the previous page printed.")
@config_option
@server_options
@json_option
@wide_option
def events(
    since: str | None, until: str | None, host: str | None, resource: str | None, type_: str | None,
    action: str | None, state: str | None, limit: int, cursor: str | None, config: str | None,
    remote: Server | None, as_json: bool, wide: bool,
) -> None:
    """What changed, failed, drifted or was blocked across the fleet, newest first: one row per resource of
    a kept pass, with its host, action, state and reason.

    --json: the page as GET /v1/events answers it, its cursor in `next`.
    """
    from datum.api.models import EventList
    from datum.cli import render
    from datum.fleet.history import events_page

    now = datetime.now(UTC)
    window, after = _window(since, until, now), _after(cursor)
    exact = {"host": host, "resource": resource, "type": type_, "action": action, "state": state}
    if remote is not None:
        page = EventList.model_validate(remote.get(
            "/v1/events", since=window.since, until=window.until, limit=limit, cursor=cursor, **exact
        ))
    else:
        with wire(config) as w:
            found = events_page(w.store, window, after=after, limit=limit, **exact)
        page = EventList.model_validate({"events": found.rows, "next": found.next})
    if as_json:
        click.echo(json.dumps(page.dump(), indent=2))
        return
    out = render.console(wide)
    render.events(page.events, out, render.Times(now, wide))
    if page.next:
        click.echo(f"next page: datum events --limit {limit} --cursor {page.next} (with the same filters)")

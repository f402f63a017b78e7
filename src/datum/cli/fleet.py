"""``datum hosts`` and ``datum reboots``: the fleet's hosts, worst first as the page lists them or a page at a time,
and its reboot leases; from the store, or a server's API (``--server``), the same models either way."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from datum.api.models import HostList, Reboots
from datum.cli.common import config_option, json_option, wide_option, wire
from datum.cli.remote import Server, server_options
from datum.core.vocab import HostState

if TYPE_CHECKING:
    from datum.core.attention import Need


def _held_back(store: Any, rows: list[Any]) -> list[Any]:
    """``rows`` (``HostSummary``) with ``heldBack`` where the rollout in force holds the host back: one read of
    the rollout, one of the page's hosts' waves (``datum.store.rollouts.held_back``, the API's decision)."""
    from datum.api.models import with_held_back
    from datum.store import rollouts as stored

    row = stored.latest(store)
    if row is None or not stored.under_way(row):
        return rows
    waves = stored.membership(store, row.id, only=[h.host for h in rows])
    return [with_held_back(h, stored.held_back(row, waves, h.host, h.revision)) for h in rows]


@dataclass(frozen=True)
class Fleet:
    """What ``datum hosts`` prints, whichever way it was read: the hosts, the reboot leases, and its *Needs a
    human* lines (``datum.api.answers.host_needs`` through the store, ``host_needs_served`` from the server's
    ``GET /v1/attention``)."""

    listing: HostList
    reboots: Reboots
    needs: list[Need]


def _fleet_from_store(
    config: str | None, state: str | None, after: str | None, limit: int, worst: bool, now: datetime
) -> Fleet:
    from datum.api.answers import host_listing, host_needs, reboot_list
    from datum.fleet.effective import unavailable
    from datum.fleet.rollouts.canaries import attention_of

    with wire(config) as w:
        fleet = w.settings.fleet
        listing = host_listing(w.store, fleet, now, state=state, after=after, limit=limit, worst=worst)
        if fleet.rollout is not None:  # the hosts the staged rollout in force holds back, as the API says
            listing.hosts = _held_back(w.store, listing.hosts)
        reboots = reboot_list(w.store, fleet, None)
        rollout = attention_of(w.store, fleet.rollout is not None)
        return Fleet(listing, reboots, host_needs(listing.hosts, reboots, rollout, unavailable(fleet.manifests)))


def _fleet_from(
    remote: Server, state: str | None, cursor: str | None, limit: int, worst: bool
) -> Fleet:
    from datum.api.answers import host_needs_served
    from datum.core.attention import Need

    listing = HostList.model_validate(
        remote.get("/v1/hosts", state=state, cursor=cursor, limit=limit, order="worst" if worst else None))
    reboots = Reboots.model_validate(remote.get("/v1/reboots"))
    served = [Need.from_json(n) for n in remote.get("/v1/attention")["needs"]]
    return Fleet(listing, reboots, host_needs_served(served, listing.hosts, reboots))


@click.command()
@click.option("--state", "state", type=click.Choice([s.value for s in HostState]), default=None,
              help="Only the hosts that read this state, by name (a host whose agent fell silent reads unknown).")
@click.option("--by-name", "by_name", is_flag=True,
              help="Every host by name, a page at a time (GET /v1/hosts's pages), instead of the worst first.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="Hosts per page.")
@click.option("--cursor", default=None, help="The next page: the cursor the previous page printed (by name).")
@config_option
@server_options
@json_option
@wide_option
def hosts(
    state: str | None, by_name: bool, limit: int, cursor: str | None, config: str | None, remote: Server | None,
    as_json: bool, wide: bool,
) -> None:
    """List the fleet's hosts, worst first as the page does (failed, unknown, drifted, awaiting-reboot,
    degraded, converged), with every state's count.

    The first LIMIT hosts in that order; the others are counted, and listed by --state STATE or --by-name,
    a page at a time (--json: the page as GET /v1/hosts answers it, its cursor in `next`).
    """
    from datum.cli import render
    from datum.core.findings import FieldError, invalid
    from datum.fleet.listing import host_after

    try:
        after = host_after(cursor) if cursor is not None else None
    except ValueError as exc:
        raise invalid([FieldError("--cursor", str(exc))], "the cursor is not one of this listing") from exc
    now = datetime.now(UTC)
    paged = state is not None or by_name or after is not None
    if remote is not None:
        found = _fleet_from(remote, state, cursor, limit, not paged)
    else:
        found = _fleet_from_store(config, state, after, limit, not paged, now)
    listing = found.listing
    if as_json:
        click.echo(json.dumps(listing.dump(), indent=2))
        return
    out = render.console(wide)
    lines = found.needs
    by_host = {n.host: n for n in reversed(lines) if n.host is not None}  # a host's first line, as the page's
    render.hosts(listing.hosts, listing.counts, out, render.Times(now, wide), lambda h: render.host_advice(h, by_host))
    render.needs_human(lines, out, after=True)
    if listing.next:
        more = f" --state {state}" if state else " --by-name"
        click.echo(f"next page: datum hosts{more} --limit {limit} --cursor {listing.next}")
    elif not paged and listing.total > len(listing.hosts):
        click.echo(
            f"the {len(listing.hosts)} worst of {listing.total} hosts; the others: datum hosts --state STATE, "
            "or --by-name for every host a page at a time"
        )


@click.group()
def reboots() -> None:
    """The fleet's reboot budget: who holds a lease, whose is overdue, and clearing one."""


@reboots.command("list")
@config_option
@server_options
@json_option
def list_reboots(config: str | None, remote: Server | None, as_json: bool) -> None:
    """Every reboot lease, group by group: rebooting, or overdue (not back, or not back healthy, within [fleet]
    reboot_timeout: its group's reboots are halted until it reports from a new boot, converged and healthy, or
    its lease is cleared); the hosts waiting, in their group's reboot_order; and whether [fleet]
    reboot_block_query blocks every group's reboots.

    --json: as GET /v1/reboots answers it.
    """
    if remote is not None:
        found = Reboots.model_validate(remote.get("/v1/reboots"))
    else:
        from datum.api.answers import reboot_list
        from datum.fleet.reboots import block

        with wire(config) as w:
            found = reboot_list(w.store, w.settings.fleet, block(w.settings.fleet))
    if as_json:
        click.echo(json.dumps(found.dump(), indent=2))
        return
    if found.blocked:
        click.echo(f"blocked: no reboot lease is granted in any group: {found.blocked}")
    leases = [(x, False) for g in found.groups for x in g.rebooting] + [(x, True) for g in found.groups for x in g.overdue]
    if not leases:
        click.echo("no host holds a reboot lease")
    for x, late in sorted(leases, key=lambda held: (held[0].group, held[0].since, held[0].host)):
        if late:
            said = (f"overdue, unhealthy ({x.unhealthy}): its group is halted" if x.unhealthy
                    else "overdue: its group is halted")
        elif x.unhealthy:
            said = f"back, not yet healthy ({x.unhealthy}), until {x.expires_at.isoformat()} at the latest"
        else:
            said = f"rebooting until {x.expires_at.isoformat()} at the latest"
        click.echo(f"{x.group}: {x.host} since {x.since.isoformat()}, {said}")
    for g in found.groups:
        if g.waiting:
            click.echo(f"{g.group}: waiting, in reboot order: {', '.join(g.waiting)}")


@reboots.command("clear")
@click.argument("host")
@click.option("--force", is_flag=True, help="Drop a live lease too (a host that may be rebooting now).")
@config_option
@server_options
@json_option
def clear_reboot(host: str, force: bool, config: str | None, remote: Server | None, as_json: bool) -> None:
    """Drop HOST's reboot lease, so that its group's reboots go on: for a host that will not come back from its
    reboot (an overdue lease), or came back unhealthy and was looked at. Its next report from a new boot would
    have freed it too. A live lease (a host rebooting now, perhaps since you looked) is kept unless --force.

    With --server: Cedar fleet:ClearRebootLease (granted to operator); the server's audit log records it.
    """
    import urllib.parse

    from datum.api.models import RebootLease

    if remote is not None:
        answer = remote.call("DELETE", f"/v1/reboots/{urllib.parse.quote(host, safe='')}", {"force": force or None})
        dropped = RebootLease.model_validate(answer)
    else:
        from datum.api.answers import clear_lease
        from datum.store import audit

        with wire(config) as w:
            # recorded in the audit log with the lease's deletion (none held: nothing done, no row)
            entry = audit.local(audit.CLEAR_REBOOT_LEASE, audit.cedar_uid("Host", host),
                                f"datum reboots clear {host}" + (" --force" if force else ""))
            with audit.acting(entry):
                dropped = clear_lease(w.store, host, force)
    if as_json:
        click.echo(json.dumps(dropped.dump()))
        return
    click.echo(f"cleared the reboot lease of {host} (group {dropped.group}, taken {dropped.since.isoformat()})")

"""``datum hosts``: the fleet's hosts from the store, worst first as the page lists them, or a page at a time."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from datum.cli.common import config_option, json_option, wide_option, wire
from datum.core.vocab import HostState


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


@click.command()
@click.option("--state", "state", type=click.Choice([s.value for s in HostState]), default=None,
              help="Only the hosts that read this state, by name (a host whose agent fell silent reads unknown).")
@click.option("--by-name", "by_name", is_flag=True,
              help="Every host by name, a page at a time (GET /v1/hosts's pages), instead of the worst first.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="Hosts per page.")
@click.option("--cursor", default=None, help="The next page: the cursor the previous page printed (by name).")
@config_option
@json_option
@wide_option
def hosts(
    state: str | None, by_name: bool, limit: int, cursor: str | None, config: str | None, as_json: bool, wide: bool
) -> None:
    """List the fleet's hosts, worst first as the page does (failed, unknown, drifted, awaiting-reboot,
    degraded, converged), with every state's count.

    The first LIMIT hosts in that order; the others are counted, and listed by --state STATE or --by-name,
    a page at a time (--json: the page as GET /v1/hosts answers it, its cursor in `next`).
    """
    from datum.api.models import host_list
    from datum.cli import render
    from datum.core.findings import FieldError, invalid
    from datum.core.order import HOST_ORDER
    from datum.fleet.listing import host_after, page, worst_first

    try:
        after = host_after(cursor) if cursor is not None else None
    except ValueError as exc:
        raise invalid([FieldError("--cursor", str(exc))], "the cursor is not one of this listing") from exc
    w = wire(config)
    now = datetime.now(UTC)
    silent = w.settings.fleet.stale_after
    paged = state is not None or by_name or after is not None
    if paged:
        found = page(w.store, silent, now, state=state, after=after, limit=limit)
    else:
        found = worst_first(w.store, silent, now, [s.value for s in HOST_ORDER], limit)
    listing = host_list(found)
    if w.settings.fleet.rollout is not None:  # the hosts the staged rollout in force holds back, as the API says
        listing.hosts = _held_back(w.store, listing.hosts)
    if as_json:
        click.echo(json.dumps(listing.dump(), indent=2))
        return
    from datum.core.attention import decide
    from datum.fleet.effective import unavailable
    from datum.fleet.rollouts.canaries import attention_of
    from datum.store.leases import read

    out = render.console(wide)
    overdue = [x.as_json() for x in read(w.store).overdue]
    lines = decide(hosts=listing.dump()["hosts"], overdue=overdue,
                   rollout=attention_of(w.store, w.settings.fleet.rollout is not None),
                   fleet_directory=unavailable(w.settings.fleet.manifests))
    by_host = {n.host: n for n in reversed(lines) if n.host is not None}  # a host's first line, as the page's
    render.hosts(listing.hosts, found.counts, out, render.Times(now, wide), lambda h: render.host_advice(h, by_host))
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
@json_option
def list_reboots(config: str | None, as_json: bool) -> None:
    """Every reboot lease, group by group: rebooting, or overdue (not back, or not back healthy, within [fleet]
    reboot_timeout: its group's reboots are halted until it reports from a new boot, converged and healthy, or
    its lease is cleared); the hosts waiting, in their group's reboot_order; and whether [fleet]
    reboot_block_query blocks every group's reboots."""
    from datum.fleet.reboots import block, waiting_in_order
    from datum.store.leases import read

    w = wire(config)
    try:
        leases = read(w.store)
    finally:
        w.store.dispose()
    fleet = w.settings.fleet
    blocked, waiting = block(fleet), waiting_in_order(fleet, leases)
    rows = [{**x.as_json(), "overdue": not x.live(leases.now)} for x in leases.all]
    if as_json:
        extra = [{"group": g, "host": h, "waiting": True} for g, hosts in sorted(waiting.items()) for h in hosts]
        click.echo(json.dumps([*rows, *extra], indent=2))
        if blocked:  # not a row: said beside them (GET /v1/reboots has it as `blocked`)
            click.echo(f"blocked: no reboot lease is granted in any group: {blocked}", err=True)
        return
    if blocked:
        click.echo(f"blocked: no reboot lease is granted in any group: {blocked}")
    if not rows:
        click.echo("no host holds a reboot lease")
    for r in rows:
        if r["overdue"]:
            said = (f"overdue, unhealthy ({r['unhealthy']}): its group is halted" if r.get("unhealthy")
                    else "overdue: its group is halted")
        elif r.get("unhealthy"):
            said = f"back, not yet healthy ({r['unhealthy']}), until {r['expiresAt']} at the latest"
        else:
            said = f"rebooting until {r['expiresAt']} at the latest"
        click.echo(f"{r['group']}: {r['host']} since {r['since']}, {said}")
    for group, hosts in sorted(waiting.items()):
        click.echo(f"{group}: waiting, in reboot order: {', '.join(hosts)}")


@reboots.command("clear")
@click.argument("host")
@click.option("--force", is_flag=True, help="Drop a live lease too (a host that may be rebooting now).")
@config_option
@json_option
def clear_reboot(host: str, force: bool, config: str | None, as_json: bool) -> None:
    """Drop HOST's reboot lease, so that its group's reboots go on: for a host that will not come back from its
    reboot (an overdue lease), or came back unhealthy and was looked at. Its next report from a new boot would
    have freed it too. A live lease (a host rebooting now, perhaps since you looked) is kept unless --force."""
    from datum.api.front.security import cedar_uid
    from datum.store import audit
    from datum.store.leases import cleared

    w = wire(config)
    # recorded in the audit log with the lease's deletion (none held: nothing done, no row)
    entry = audit.local(audit.CLEAR_REBOOT_LEASE, cedar_uid("Host", host),
                        f"datum reboots clear {host}" + (" --force" if force else ""))
    try:
        with audit.acting(entry):
            dropped = cleared(w.store, host, force=force)
    finally:
        w.store.dispose()
    if as_json:
        click.echo(json.dumps(dropped.as_json()))
        return
    click.echo(f"cleared the reboot lease of {host} (group {dropped.group}, taken {dropped.since.isoformat()})")

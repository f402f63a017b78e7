"""``datum audit`` and ``datum audit verify``: the audit log from the store (``datum.store.audit``).

The same pages as ``GET /v1/audit`` (``datum.fleet.history.audit_page``), the same JSON with ``--json``;
``verify`` walks the hash chain from its anchor and exits 1 naming the first row that does not hold.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from datum.cli.common import config_option, json_option, wide_option, wire
from datum.cli.history import _after, _window

BROKEN = 1  # datum audit verify: the chain does not hold (datum.cli.exits)


@click.group(invoke_without_command=True)
@click.option("--since", default=None, help="Only rows written since: a duration back from now (1h, 1d) or a time (RFC 3339).")
@click.option("--until", default=None, help="Only rows written before: a duration back from now or a time.")
@click.option("--principal", default=None, help="Only this principal's (cli:USER for the CLI's acts).")
@click.option("--action", default=None, help="Only this action's (fleet:ManageRollout, token:Create, ...).")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="Rows per page.")
@click.option("--cursor", default=None, help="The next page: the cursor the previous page printed.")
@config_option
@json_option
@wide_option
@click.pass_context
def audit(
    ctx: click.Context, since: str | None, until: str | None, principal: str | None, action: str | None, limit: int,
    cursor: str | None, config: str | None, as_json: bool, wide: bool,
) -> None:
    """Who did what, newest first: every acting request, every refusal (401, 403), every token created or revoked,
    lease cleared or rollout commanded here; when, who, from where, the Cedar action and resource, the outcome and
    the policies that decided. Kept [server] audit_keep long.

    --json: the page as GET /v1/audit answers it, its cursor in `next`. datum audit verify checks the chain.
    """
    if ctx.invoked_subcommand is not None:
        return
    from datum.api.models import AuditList
    from datum.cli import render
    from datum.fleet.history import audit_page

    now = datetime.now(UTC)
    window, after = _window(since, until, now), _after(cursor)
    with wire(config) as w:
        found = audit_page(w.store, window, principal=principal, action=action, after=after, limit=limit)
    page = AuditList.model_validate({"entries": found.rows, "next": found.next})
    if as_json:
        click.echo(json.dumps(page.dump(), indent=2))
        return
    render.audit(page.entries, render.console(wide), render.Times(now, wide))
    if page.next:
        click.echo(f"next page: datum audit --limit {limit} --cursor {page.next} (with the same filters)")


@audit.command()
@config_option
@json_option
def verify(config: str | None, as_json: bool) -> None:
    """Walk the audit log's hash chain from its anchor (the last row pruned) to its head, recomputing each row's
    hash: exit 0 when the chain is whole, 1 naming the first row that does not hold (edited, missing, or chained
    to another). Prints the head's hash: kept elsewhere, it tells a chain rewritten whole from some row on.
    Rows written and not chained yet (datum serve chains them a second later) are chained first, then checked."""
    from datum.store import auditchain as log

    with wire(config) as w:
        log.seal(w.store)
        found = log.verify(w.store)
    if as_json:
        click.echo(json.dumps(found.as_json(), indent=2))
    else:
        start = (f"from row {found.anchor.seq + 1} (rows up to {found.anchor.seq}, written until "
                 f"{log.when(found.anchor.at)}, pruned by [server] audit_keep)" if found.anchor.seq else "from row 1")
        if found.whole:
            click.echo(f"the audit log's chain is whole: {found.rows} rows {start}; head row {found.head.seq}, "
                       f"hash {found.head.hash}"
                       + (f"; {found.unsealed} rows written since, not chained yet" if found.unsealed else ""))
        else:
            click.echo(f"the audit log's chain is broken at row {found.broken}: {found.why} "
                       f"({found.rows} rows {start} hold)", err=True)
    if not found.whole:
        click.get_current_context().exit(BROKEN)

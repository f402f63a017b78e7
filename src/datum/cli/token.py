"""``datum token create``, ``list`` and ``revoke``: bearer tokens, of which only the hash is stored."""

from __future__ import annotations

import json

import click

from datum.cli.common import config_option, json_option, wide_option


@click.group()
def token() -> None:
    """Bearer tokens for the HTTP API and the web page."""


@token.command()
@click.option("--principal", required=True,
              help="Who the token speaks for (the Cedar principal): viewer, operator, admin or agent.")
@click.option("--host", default=None, help="Bind the token to one host: it may read that host's manifest and report its passes only.")
@click.option("--group", "groups", multiple=True, metavar="GROUP",
              help="Scope the token to a host group (nodes.yaml's group; again for more): it sees and acts on "
                   "those groups' hosts only, and nothing fleet-wide but reading.")
@config_option
@json_option
def create(principal: str, host: str | None, groups: tuple[str, ...], config: str | None, as_json: bool) -> None:
    """Mint a token for PRINCIPAL and print it once, alone on the last line.

    With --json: one object, the token in `token` beside its `id` (what datum token list and revoke
    name it by), `principal`, `host` and `groups`.
    """
    from datum.api.front.tokens import ID_LENGTH, digest
    from datum.api.front.tokens import create as create_token
    from datum.config import load_settings
    from datum.store import open_store

    settings = load_settings(config)
    store = open_store(settings.store_url, lock_wait=settings.host.lock_wait)
    try:
        secret = create_token(store, principal, host, groups)
    finally:
        store.dispose()
    scope = sorted(set(groups)) or None
    if as_json:
        made = {"id": digest(secret)[:ID_LENGTH], "principal": principal, "host": host, "groups": scope,
                "token": secret}
        click.echo(json.dumps(made, indent=2))
        return
    bound = f" bound to host {host}" if host else f" scoped to host groups {', '.join(scope)}" if scope else ""
    click.echo(f"token for principal {principal}{bound} (stored as a SHA-256 hash; it is not shown again):", err=True)
    click.echo(secret)


@token.command(name="list")
@config_option
@json_option
@wide_option
def list_tokens(config: str | None, as_json: bool, wide: bool) -> None:
    """The store's tokens, oldest first, by id (the first digits of the stored hash), principal, host, host
    groups and creation; never a token."""
    from datetime import UTC, datetime

    from datum.api.front.tokens import listed
    from datum.cli import render
    from datum.config import load_settings
    from datum.store import open_store

    settings = load_settings(config)
    store = open_store(settings.store_url, lock_wait=settings.host.lock_wait)
    try:
        rows = listed(store)
    finally:
        store.dispose()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    render.tokens(rows, render.console(wide), render.Times(datetime.now(UTC), wide))


@token.command()
@click.argument("token_id")
@config_option
@json_option
def revoke(token_id: str, config: str | None, as_json: bool) -> None:
    """Delete the token TOKEN_ID (from datum token list); every running server refuses it within seconds.

    With --json: the token revoked, as datum token list showed it.
    """
    from datum.api.front.tokens import RECHECK
    from datum.api.front.tokens import revoke as revoke_token
    from datum.config import load_settings
    from datum.store import open_store

    settings = load_settings(config)
    store = open_store(settings.store_url, lock_wait=settings.host.lock_wait)
    try:
        gone = revoke_token(store, token_id)
    finally:
        store.dispose()
    if as_json:
        click.echo(json.dumps(gone, indent=2))
        return
    bound = (f" bound to host {gone['host']}" if gone["host"]
             else f" scoped to host groups {', '.join(gone['groups'])}" if gone["groups"] else "")
    click.echo(f"revoked token {gone['id']} of principal {gone['principal']}{bound}; "
               f"running servers refuse it within {RECHECK:g} s")

"""``datum token create``, ``list`` and ``revoke``: bearer tokens, of which only the hash is stored."""

from __future__ import annotations

import click

from datum.cli.common import config_option, json_option


@click.group()
def token() -> None:
    """Bearer tokens for the HTTP API and the web page."""


@token.command()
@click.option("--principal", required=True, help="Who the token speaks for (the Cedar principal), e.g. operator or agent.")
@click.option("--host", default=None, help="Bind the token to one host: it may read that host's manifest and report its passes only.")
@config_option
def create(principal: str, host: str | None, config: str | None) -> None:
    """Mint a token for PRINCIPAL and print it once, alone on the last line."""
    from datum.api.tokens import create as create_token
    from datum.config import load_settings
    from datum.store import open_store

    settings = load_settings(config)
    secret = create_token(open_store(settings.store_url, lock_wait=settings.host.lock_wait), principal, host)
    bound = f" bound to host {host}" if host else ""
    click.echo(f"token for principal {principal}{bound} (stored as a SHA-256 hash; it is not shown again):", err=True)
    click.echo(secret)


@token.command(name="list")
@config_option
@json_option
def list_tokens(config: str | None, as_json: bool) -> None:
    """The store's tokens by id (the first digits of the stored hash), principal, host and creation; never a token."""
    import json

    from datum.api.tokens import listed
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
    for r in rows:
        bound = f" host {r['host']}" if r["host"] else ""
        click.echo(f"{r['id']}  {r['principal']}{bound}  created {r['createdAt']}")


@token.command()
@click.argument("token_id")
@config_option
def revoke(token_id: str, config: str | None) -> None:
    """Delete the token TOKEN_ID (from datum token list); every running server refuses it within seconds."""
    from datum.api.tokens import RECHECK
    from datum.api.tokens import revoke as revoke_token
    from datum.config import load_settings
    from datum.store import open_store

    settings = load_settings(config)
    store = open_store(settings.store_url, lock_wait=settings.host.lock_wait)
    try:
        gone = revoke_token(store, token_id)
    finally:
        store.dispose()
    bound = f" bound to host {gone['host']}" if gone["host"] else ""
    click.echo(f"revoked token {gone['id']} of principal {gone['principal']}{bound}; "
               f"running servers refuse it within {RECHECK:g} s")

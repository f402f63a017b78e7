"""``datum token create``: mint a bearer token for a principal; only its hash is stored."""

from __future__ import annotations

import click

from datum.cli.common import config_option


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

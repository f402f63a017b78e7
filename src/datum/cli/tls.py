"""``datum tls show``: the certificate ``datum serve`` presents, and what its agents trust (``datum.fleet.tls``)."""

from __future__ import annotations

import json

import click

from datum.cli.common import config_option, json_option


@click.group()
def tls() -> None:
    """The server's TLS certificate."""


@tls.command()
@config_option
@json_option
def show(config: str | None, as_json: bool) -> None:
    """The CA file agents trust (--ca-file), its pin (--pin), the names and expiry of the server's certificate.

    Reads what is there and makes nothing: with tls = "auto", datum serve makes the CA and certificate on
    its first start. With --json: tls (auto or files), caFile (null with files: their CA is not Datum's),
    pin, names, notAfter, certFile, keyFile, and chain (each certificate presented: subject, pin, notAfter).
    """
    from datetime import UTC, datetime

    from datum.config import load_settings
    from datum.core.findings import ErrorCode, Problem
    from datum.core.humanize import ago, when
    from datum.fleet.tls import described

    served = described(load_settings(config))
    if served is None:
        raise Problem.one(
            ErrorCode.INVALID_INPUT,
            'TLS is off in this configuration: set [server] tls = "auto", or tls_cert and tls_key',
        )
    if as_json:
        click.echo(json.dumps(served.dump(), indent=2))
        return
    now = datetime.now(UTC)
    rows = [
        ("tls", served.mode),
        ("CA file", str(served.ca_file) if served.ca_file else "none of Datum's (tls_cert names the chain)"),
        ("pin", served.pin),
        ("names", ", ".join(served.names) or "none"),
        ("expires", f"{when(served.not_after)} ({ago(served.not_after, now)})"),
        ("certificate", str(served.cert_file)),
    ]
    for label, value in rows:
        click.echo(f"{label + ':':<13}{value}")
    if served.ca_file is not None:
        click.echo(f"\nagents trust it with --ca-file (a copy of {served.ca_file}) or --pin {served.pin}")

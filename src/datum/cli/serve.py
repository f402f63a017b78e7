"""``datum serve``: the HTTP API and the web page, with the enabled reconcilers ticking."""

from __future__ import annotations

import logging

import click

from datum.cli.common import config_option


@click.command()
@config_option
@click.option("--host", default=None, help="Address to listen on (default: [server] host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="Port (default: [server] port, 8080).")
@click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="json: one JSON object per log line (access log included), for log shippers.",
)
def serve(config: str | None, host: str | None, port: int | None, log_format: str) -> None:
    """Serve the HTTP API and the web page; tick every enabled reconciler at its interval."""
    from datum.api.server import run, serving_app
    from datum.cli.common import wire

    w = wire(config)  # validate the configuration and open the store before listening
    server = w.settings.server
    host = host or server.host
    port = server.port if port is None else port
    app = serving_app(w.settings, lambda: (w.registry, w.store))
    shown = f"[{host}]" if ":" in host else host
    banner = f"datum: serving the page at http://{shown}:{port}/ (API under /v1, OpenAPI at /docs)"
    if log_format == "json":
        from datum.api.server import JsonLines

        record = logging.LogRecord("datum.server", logging.INFO, __file__, 0, banner, None, None)
        click.echo(JsonLines().format(record))
    else:
        click.echo(banner)
    run(app, host, port, access_log=server.access_log, log_format=log_format)

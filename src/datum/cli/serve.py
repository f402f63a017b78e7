"""``datum serve``: the HTTP API and the web page, with the enabled reconcilers ticking."""

from __future__ import annotations

import click

from datum.cli.common import config_option


@click.command()
@config_option
@click.option("--host", default=None, help="Address to listen on (default: [server] host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="Port (default: [server] port, 8080).")
def serve(config: str | None, host: str | None, port: int | None) -> None:
    """Serve the HTTP API and the web page; tick every enabled reconciler at its interval."""
    from datum.api.server import run, serving_app
    from datum.cli.common import wire

    w = wire(config)  # validate the configuration and open the store before listening
    server = w.settings.server
    host = host or server.host
    port = server.port if port is None else port
    app = serving_app(w.settings, lambda: (w.registry, w.store))
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"datum: serving the page at http://{shown}:{port}/ (API under /v1, OpenAPI at /docs)")
    run(app, host, port, access_log=server.access_log)

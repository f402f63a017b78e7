"""``datum serve``: the HTTP API and the web page, with the enabled reconcilers ticking.

The address is tried before anything is said: a busy port is an error of its own (exit 69) and the
banner "serving the page at ..." is printed only once the port could be had. Plain HTTP is served on
loopback only, unless asked (``--insecure-http``, ``[server] insecure_http``): anywhere else the bearer
tokens would cross the network readable, and the start is refused (exit 65) before anything listens.
With TLS (``datum.fleet.tls``) the certificate is made or renewed first, and the banner says what agents
trust.
"""

from __future__ import annotations

import errno
import logging
import socket

import click

from datum.cli.common import config_option


def can_listen(host: str, port: int) -> str | None:
    """None when ``host``:``port`` can be listened on now, else why not (uvicorn binds the same way).

    A port in use by a listening socket is refused even with ``SO_REUSEADDR``, which lets a port
    left in TIME_WAIT by a server that just stopped be taken at once, as uvicorn takes it.
    """
    if port == 0:
        return None  # any free port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
            probe.listen(1)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} is busy: another process listens on {shown}; stop it, or serve on another --port"
            if exc.errno == errno.EACCES:
                return f"may not listen on {shown}: a port below 1024 needs privileges; serve on another --port"
            if exc.errno == errno.EADDRNOTAVAIL:
                return f"cannot listen on {shown}: {host} is not an address of this host"
            return f"cannot listen on {shown}: {exc.strerror or exc}"
        except (socket.gaierror, UnicodeError) as exc:
            return f"cannot listen on {shown}: {host!r} does not resolve ({exc})"
    return None


@click.command()
@config_option
@click.option("--host", default=None, help="Address to listen on (default: [server] host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="Port (default: [server] port, 8080).")
@click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="text: one line per event, after its UTC time; json: one JSON object per log line (access log "
    "included), for log shippers.",
)
@click.option(
    "--insecure-http", "insecure_http", is_flag=True,
    help="Serve plain HTTP on an address other than loopback (behind a proxy that speaks TLS); "
    "as [server] insecure_http = true.",
)
def serve(config: str | None, host: str | None, port: int | None, log_format: str, insecure_http: bool) -> None:
    """Serve the HTTP API and the web page; tick every enabled reconciler at its interval."""
    from datum.api.server import run, serving_app
    from datum.cli.common import wire
    from datum.core.findings import ErrorCode, Problem
    from datum.fleet import tls

    w = wire(config)  # validate the configuration and open the store before listening
    server = w.settings.server
    host = host or server.host
    port = server.port if port is None else port
    try:
        refused = tls.plain_http_refused(host, server.https, insecure_http or server.insecure_http)
        if refused is not None:
            raise refused
        busy = can_listen(host, port)
        if busy is not None:
            raise Problem.one(ErrorCode.UNAVAILABLE, busy)
        served = tls.prepared(w.settings)
        context = tls.context(served) if served is not None else None
    except BaseException:
        w.store.dispose()
        raise
    app = serving_app(w.settings, lambda: (w.registry, w.store))
    app.state.datum.tls = served
    shown = f"[{host}]" if ":" in host else host
    scheme = "https" if served is not None else "http"
    lines = [f"datum: serving the page at {scheme}://{shown}:{port}/ (API under /v1, OpenAPI at /docs)"]
    if served is not None:
        lines.append(tls.banner(served))
    for line in lines:
        record = logging.LogRecord("datum.server", logging.INFO, __file__, 0, line, None, None)
        if log_format == "json":
            from datum.api.server import JsonLines

            click.echo(JsonLines().format(record))
        else:
            from datum.api.server import text_formatter

            click.echo(text_formatter().format(record))
    run(app, host, port, access_log=server.access_log, log_format=log_format, tls=context)

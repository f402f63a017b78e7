"""Running the app: uvicorn on the configured address, with the scheduler ticking the reconcilers.

The registry and the store are wired in the app's lifespan, which uvicorn runs
before it opens the socket; then the scheduler starts, the watch that
forgets a cached drift report when any process records a tick of its
reconciler, the thread that checks remembered tokens against the store
(``datum.api.watch``), and, with a fleet, the fleet server's watch of its
directory for the agents' long polls (``datum.fleet.changes``), whose waits end
at once when the server shuts down, and the checks of its staged rollouts
(``datum.fleet.rollouts.machine``). ``503 UNAVAILABLE`` is
what an app answers before it is wired (``create_app`` without a registry,
e.g. when the app is mounted by another ASGI server that skips lifespans).

Over TLS (``datum.fleet.tls``), SIGHUP loads the certificate files again into the
context the listening socket uses (an auto certificate issued again first when
it is due): new handshakes present them, open connections and the long polls
they hold go on; files that do not load leave the certificate in use, and the
log says why.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import logging
import signal
import ssl
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import uvicorn
import uvicorn.config
from fastapi import FastAPI
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from datum.api.app import create_app
from datum.api.corked import Corked
from datum.api.front.errors import redacted, written
from datum.api.front.hostgroups import FRESH as GROUPS_FRESH
from datum.api.front.tokens import RECHECK
from datum.api.watch import Every, RunWatch
from datum.config import Settings
from datum.core.findings import ErrorCode, Problem
from datum.fleet.approvals import PERIOD as APPROVALS_EVERY
from datum.fleet.approvals import Asker
from datum.fleet.changes import FleetChanges
from datum.fleet.labels import FRESH as LABELS_FRESH
from datum.fleet.rollouts import machine, serve
from datum.fleet.serving import served
from datum.reconcile.registry import Registry
from datum.reconcile.runner import Runner, Tick
from datum.reconcile.scheduler import Scheduler, ticking
from datum.store import Store

log = logging.getLogger("datum.server")

RETAIN_EVERY = 600.0  # seconds between two runs of the pass archive's retention (the first at start)
SEAL_EVERY = 1.0  # seconds between two seals of the audit log's new rows into its chain (the first at start)


def control_pool(reconcilers: int) -> tuple[int, int]:
    """The control loop's pool (kept connections, overflow) for ``reconcilers`` ticking ones.

    A tick holds at most three at once (PostgreSQL's session lock, its lease's renewal, the pass's own
    transaction) and the retention one: kept for them all, a little overflow past that.
    """
    return 3 * reconcilers + 1, 2


def retained(store: Store, keep: timedelta) -> None:
    """One run of the pass archive's retention (``datum.store.passes.retain``); a failure is logged, not raised."""
    from datum.store.passes import retain

    try:
        gone = retain(store, keep)
    except Exception:  # noqa: BLE001 - the next run tries again; serving goes on
        log.exception("pass retention failed")
        return
    if gone:
        log.info("pass retention: %d passes received more than %s ago dropped", gone, keep)


def audit_retained(store: Store, keep: timedelta) -> None:
    """One run of the audit log's retention (``datum.store.auditchain.prune``, by the store's clock); a failure is logged."""
    from datum.store import auditchain
    from datum.store.runs import store_now

    try:
        with store.connect() as conn:
            now = store_now(conn)
        gone = auditchain.prune(store, now - keep)
    except Exception:  # noqa: BLE001 - the next run tries again; serving goes on
        log.exception("audit log retention failed")
        return
    if gone:
        log.info("audit log retention: %d rows written more than %s ago dropped (the chain's anchor moved)", gone, keep)


def nonces_purged(store: Store) -> None:
    """Drop the spent nonces no server would take any more (``datum.store.nonces.purge``); a failure is logged."""
    from datum.store import nonces

    try:
        nonces.purge(store, datetime.now(UTC))
    except Exception:  # noqa: BLE001 - the next run tries again; serving goes on
        log.exception("purging spent nonces failed")


def audit_sealed(store: Store) -> None:
    """One seal of the audit log's new rows into its chain (``datum.store.auditchain.seal``, any replica's rows and
    the CLI's too); a failure is logged and the rows wait for the next."""
    from datum.store import auditchain

    try:
        auditchain.seal(store)
    except Exception:  # noqa: BLE001 - the next run tries again; serving goes on
        log.exception("sealing the audit log's new rows failed")


def serving_app(settings: Settings, wire: Callable[[], tuple[Registry, Store]]) -> FastAPI:
    """The app with a lifespan that wires ``wire()``'s registry and store, and ticks the reconcilers."""
    app = create_app(settings)
    state = app.state.datum

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        registry, store = wire()
        state.wire(registry, store)
        loop = asyncio.get_running_loop()

        def forget(name: str | None) -> None:
            # On the event loop, where the cache is read and filled: never between its check and its store.
            loop.call_soon_threadsafe(state.reports.invalidate, name)

        # Ticks recorded by any process on the store (other replicas, datum reconcile), and revoked tokens.
        watch = RunWatch(store, forget)
        recheck = Every(state.tokens.revalidate, RECHECK, "token-recheck")
        # The recorded groups of the hosts that tokens scoped to host groups asked about (datum.api.front.hostgroups).
        regroup = Every(state.host_groups.revalidate, GROUPS_FRESH, "host-groups")
        # The control loop (the scheduler's ticks, the retention) has connections of its own: requests, however
        # many (a storm of reports, of page loads), never take the ones a tick needs.
        control = store.own_pool(*control_pool(len(ticking(registry, settings))))
        # Every host pass is kept [server] retention long: older ones dropped in batches, here, never at intake.
        retention = Every(lambda: retained(control, settings.server.retention), RETAIN_EVERY, "pass-retention")
        # The audit log is kept [server] audit_keep long (datum.store.auditchain.prune).
        audit_retention = Every(lambda: audit_retained(control, settings.server.audit_keep), RETAIN_EVERY, "audit-retention")
        # The nonces hosts signed are kept past their life, then dropped here (datum.store.nonces).
        spent = Every(lambda: nonces_purged(control), RETAIN_EVERY, "nonce-purge")
        # Its rows are written unchained by the acts themselves (no lock) and chained here a second later.
        audit_seal = Every(lambda: audit_sealed(control), SEAL_EVERY, "audit-seal")
        # The labels hosts were given at enrollment, read whole every few seconds (datum.fleet.labels).
        relabel = Every(state.fleet.labels.refresh, LABELS_FRESH, "enrolled-labels")
        # Pending enrollments are taken to the approval hook here, never inside their request (datum.fleet.approvals).
        asker = approvals = None
        if settings.enroll.approve is not None:
            asker = Asker(control, settings.enroll.approve, settings.enroll.approve_timeout, state.clock)
            approvals = Every(asker.poll, APPROVALS_EVERY, "enroll-approvals")
            state.ask_approval = approvals.wake
        watch.start()
        recheck.start()
        regroup.start()
        retention.start()
        audit_retention.start()
        spent.start()
        audit_seal.start()
        relabel.start()
        if approvals is not None:
            approvals.start()
        fleet = state.fleet
        if settings.fleet.manifests is not None:
            # each state of the directory is named and recorded as soon as it is seen (datum.fleet.serving)
            # with staged rollouts, the rollout in force is read each period too: a wave released wakes the waits
            # and a change of the files wakes the waiters of the hosts its rollout serves anew (its canaries)
            rolled = settings.fleet.rollout is not None
            probe = partial(serve.announce, fleet) if rolled else None
            moved = partial(serve.moved, fleet) if rolled else None
            fleet.changes = FleetChanges(settings.fleet.manifests, seen=partial(served, fleet), probe=probe, moved=moved)
            fleet.changes.start()
        # a rollout's waves move on a pass's intake and here, so a soak ends without a report
        # (datum.fleet.rollouts.machine)
        checks = None
        if settings.fleet.rollout is not None and settings.fleet.manifests is not None:
            checks = Every(lambda: machine.tick(fleet), partial(machine.next_check, fleet), "rollout-check")
            fleet.rollouts.wake_check = checks.wake
            checks.start()
        # Everything allocated so far lives as long as the process: take it out of the
        # collector's sight, so a full collection under load scans only request garbage.
        gc.collect()
        gc.freeze()
        scheduler = None
        if settings.server.scheduler:

            def ticked(tick: Tick) -> None:
                forget(tick.reconciler)

            scheduler = Scheduler(Runner(registry, settings, control), on_tick=ticked)
            scheduler.start()
        try:
            yield
        finally:
            if scheduler is not None:
                scheduler.stop()
            watch.stop()
            recheck.stop()
            regroup.stop()
            retention.stop()
            audit_retention.stop()
            spent.stop()
            audit_seal.stop()
            relabel.stop()
            audit_sealed(control)  # what this server's last requests wrote, chained before it goes
            if approvals is not None and asker is not None:
                state.ask_approval = None
                approvals.stop()
                asker.close()
            if checks is not None:
                checks.stop()
            if fleet.changes is not None:
                await fleet.changes.stop()
            if control is not store:
                control.dispose()
            store.dispose()

    app.router.lifespan_context = lifespan
    return app


class TokensLeftOut(logging.Filter):
    """Access log lines keep the path without what may carry a token: the query string (``?token=...``) is
    dropped, and a path segment that looks like a token (``/v1/hosts/datum_...``, by mistake) redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            path, query, _ = args[2].partition("?")
            record.args = (*args[:2], redacted(path) + ("?[query omitted]" if query else ""), *args[3:])
        return True


_REASONS = {
    400: b"400 Bad Request",
    414: b"414 URI Too Long",
    431: b"431 Request Header Fields Too Large",
}


class HeaderDeadline(HttpToolsProtocol):
    """uvicorn's HTTP protocol, closing a connection whose request line and headers take too long.

    uvicorn times out an idle keep-alive connection but not a client that opens a
    connection and sends nothing, or trickles its headers a byte at a time
    (slowloris): each would hold a connection forever. Here a deadline starts when
    the connection opens and when each request's first byte arrives, and ends
    when the headers are complete; past it the connection is closed. A request's
    deadline is armed only when a chunk leaves its headers incomplete, so a
    request that arrives in one piece costs no timer.

    Its own state is in slots, not in the instance's dict: uvicorn's protocol sets
    28 attributes, and four more would pass the 30 that CPython keeps in a
    dict's shared keys, which makes every connection's dict a table of its own
    (1.5 KiB more per connection, held poll or not; docs/performance.md).
    """

    __slots__ = ("_header_timer", "_header_bytes", "_parsed_bytes", "_heading", "_refusal")

    header_timeout: float = 10.0
    max_header_bytes: int = 64 * 1024
    max_url_bytes: int = 8 * 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._header_bytes = 0  # of the chunks that left this request's headers incomplete
        self._parsed_bytes = 0  # of the headers the parser completed
        self._heading = False  # in a request line and headers
        self._refusal: tuple[int, str] | None = None

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request it cannot parse, in the contract's error shape (it says plain text)."""
        status, message = self._refusal or (400, "the request is not valid HTTP: it cannot be parsed")
        self._refusal = None
        self._refuse(status, message)

    def _refuse(self, status: int, message: str) -> None:
        self._disarm()
        _status, body = written(Problem.one(ErrorCode.INVALID_INPUT, message), status)
        self.transport.write(
            b"HTTP/1.1 " + _REASONS[status] + b"\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        self.transport.close()

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self.max_url_bytes:
            # Raising stops the parser; uvicorn then calls send_400_response, which answers this instead.
            self._refusal = (414, f"the request target is longer than {self.max_url_bytes} bytes")
            raise ValueError("request target too long")

    def on_header(self, name: bytes, value: bytes) -> None:
        # Each header as the parser completes it: a chunk that completes the headers is parsed before
        # ``data_received`` can count it, so the headers a request holds are counted here too.
        super().on_header(name, value)
        self._parsed_bytes += len(name) + len(value) + 4  # ": " and CRLF
        if self._parsed_bytes + len(self.url) > self.max_header_bytes:
            self._refusal = (431, self._too_large)
            raise ValueError("request headers too large")

    @property
    def _too_large(self) -> str:
        return f"the request line and headers exceed {self.max_header_bytes} bytes"

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # a response's head and body in one send (datum.api.corked)
        super().connection_made(Corked(transport, self.loop))  # type: ignore[arg-type]
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self._heading or self.transport.is_closing():
            return
        # This chunk left a request line or headers incomplete: bounded in size and in time. A request
        # that arrives whole in one chunk (the usual case) never arms a timer.
        self._header_bytes += len(data)
        if self._header_bytes > self.max_header_bytes:
            self._refuse(431, self._too_large)
        elif self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._late)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._disarm()  # the wait for the connection's first byte is over; this request's starts now
        self._header_bytes = self._parsed_bytes = 0
        self._heading = True

    def on_headers_complete(self) -> None:
        self._heading = False
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._header_bytes = 0
        self._header_timer = self.loop.call_later(self.header_timeout, self._late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _late(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()


class JsonLines(logging.Formatter):
    """One JSON object per line, for log shippers: time, level, logger, message; an access line's parts apart."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        args = record.args
        if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
            client, method, path, version, status = args
            out.update(client=client, method=method, path=path, httpVersion=version, status=status)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


# Text log lines start with their time, in UTC with its zone, as JSON lines' ``time``: 2026-11-29T23:49:10.123Z.
TEXT_TIME = {"fmt_prefix": "%(asctime)s.%(msecs)03dZ ", "datefmt": "%Y-%m-%dT%H:%M:%S"}


def text_formatter() -> logging.Formatter:
    """The text log's line for Datum's own records (the ``datum serve`` banner among them)."""
    return _utc("uvicorn.logging.DefaultFormatter")(
        TEXT_TIME["fmt_prefix"] + "%(levelprefix)s %(message)s", TEXT_TIME["datefmt"], use_colors=False
    )


def log_config(log_format: str) -> dict[str, Any]:
    """uvicorn's logging configuration, as text (its own lines, each after its UTC time; Datum's loggers
    too) or JSON lines (every logger, Datum's included)."""
    if log_format == "text":
        config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
        for formatter in config["formatters"].values():
            formatter["fmt"] = TEXT_TIME["fmt_prefix"] + formatter["fmt"]
            formatter["datefmt"] = TEXT_TIME["datefmt"]
            formatter["()"] = _utc(formatter["()"])
        config["formatters"]["datum"] = {"()": text_formatter}
        config["handlers"]["datum"] = {**config["handlers"]["default"], "formatter": "datum"}
        config["root"] = {"handlers": ["datum"], "level": "INFO"}
        return config
    handler = {"formatter": "json", "class": "logging.StreamHandler", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonLines}},
        "handlers": {"json": handler},
        "loggers": {
            "uvicorn": {"handlers": ["json"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"handlers": ["json"], "level": "INFO", "propagate": False},
        },
        "root": {"handlers": ["json"], "level": "INFO"},
    }


def _utc(factory: str) -> type[Any]:
    """uvicorn's formatter class ``factory`` (a dotted name), telling times in UTC."""
    import importlib

    module, _, name = factory.rpartition(".")
    base: type[Any] = getattr(importlib.import_module(module), name)
    return type(f"Utc{name}", (base,), {"converter": staticmethod(time.gmtime)})


def uvicorn_config(
    app: FastAPI, host: str, port: int, access_log: bool = True, log_format: str = "text",
    tls: ssl.SSLContext | None = None,
) -> uvicorn.Config:
    """The uvicorn configuration of ``app``: its ``[server]`` limits and timeouts applied; over ``tls``
    (the server's context, ``datum.fleet.tls.context``) when given."""
    server = app.state.datum.settings.server
    protocol = type("DatumHTTP", (HeaderDeadline,), {"header_timeout": server.header_timeout.total_seconds()})
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol,
        access_log=access_log,
        log_level="info",
        log_config=log_config(log_format),
        server_header=False,
        timeout_keep_alive=max(1, round(server.keep_alive.total_seconds())),
        h11_max_incomplete_event_size=64 * 1024,
        ssl_context_factory=None if tls is None else (lambda _config, _default: tls),
    )


def run(
    app: FastAPI, host: str, port: int, access_log: bool = True, log_format: str = "text",
    tls: ssl.SSLContext | None = None,
) -> None:
    """Serve ``app`` until interrupted (over ``tls``, when given). Access log lines carry method, path and
    status: never headers, a query or a token."""
    config = uvicorn_config(app, host, port, access_log, log_format, tls)
    logging.getLogger("uvicorn.access").addFilter(TokensLeftOut())
    DatumServer(config, tls).run()


def reload_tls(app: FastAPI, tls: ssl.SSLContext) -> None:
    """SIGHUP: the certificate files loaded again into ``tls`` (an auto certificate issued again when due);
    when they do not load, the certificate in use stays, and the log says why."""
    from datum.core.findings import Problem
    from datum.fleet import tls as certs

    state = app.state.datum
    try:
        served = certs.prepared(state.settings)
        if served is None:
            return
        certs.load(tls, served)
    except Problem as problem:
        log.error("SIGHUP: the certificate in use is kept: %s", problem.findings[0].message)
        return
    state.tls = served
    made = f" (issued again: {', '.join(served.made)})" if served.made else ""
    log.info("SIGHUP: the certificate of %s was loaded again%s; it expires %s",
             ", ".join(served.names), made, served.dump()["notAfter"])


class DatumServer(uvicorn.Server):
    """uvicorn's server, whose graceful shutdown first answers the held long polls (``datum.fleet.changes``):
    it waits for every request in flight, a wait of minutes included, even one whose client has left.
    Over TLS, SIGHUP loads the certificate again (``reload_tls``)."""

    def __init__(self, config: uvicorn.Config, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(config)
        self.tls = tls

    async def startup(self, sockets: list[Any] | None = None) -> None:
        if self.tls is not None:
            app: Any = self.config.app  # the FastAPI app run() was given
            tls = self.tls
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, lambda: reload_tls(app, tls))
        await super().startup(sockets)

    async def shutdown(self, sockets: list[Any] | None = None) -> None:
        state = getattr(getattr(self.config.app, "state", None), "datum", None)
        changes = state.fleet.changes if state is not None else None
        if changes is not None:
            changes.close()
        await super().shutdown(sockets)

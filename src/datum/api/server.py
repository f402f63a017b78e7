"""Running the app: uvicorn on the configured address, with the scheduler ticking the reconcilers.

The registry and the store are wired in the app's lifespan, which uvicorn runs
before it opens the socket; then the scheduler starts. ``503 UNAVAILABLE`` is
what an app answers before it is wired (``create_app`` without a registry,
e.g. when the app is mounted by another ASGI server that skips lifespans).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI

from datum.api.app import create_app
from datum.config import Settings
from datum.reconcile.registry import Registry
from datum.reconcile.runner import Runner, Tick
from datum.reconcile.scheduler import Scheduler
from datum.store import Store

log = logging.getLogger("datum.server")


def serving_app(settings: Settings, wire: Callable[[], tuple[Registry, Store]]) -> FastAPI:
    """The app with a lifespan that wires ``wire()``'s registry and store, and ticks the reconcilers."""
    app = create_app(settings)
    state = app.state.datum

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        registry, store = wire()
        state.wire(registry, store)
        # Everything allocated so far lives as long as the process: take it out of the
        # collector's sight, so a full collection under load scans only request garbage.
        gc.collect()
        gc.freeze()
        scheduler = None
        if settings.server.scheduler:

            def ticked(tick: Tick) -> None:
                state.reports.invalidate(tick.reconciler)

            scheduler = Scheduler(Runner(registry, settings, store), on_tick=ticked)
            scheduler.start()
        try:
            yield
        finally:
            if scheduler is not None:
                scheduler.stop()
            store.dispose()

    app.router.lifespan_context = lifespan
    return app


def run(app: FastAPI, host: str, port: int, access_log: bool = True) -> None:
    """Serve ``app`` until interrupted. Access log lines carry method, path and status: never headers."""
    uvicorn.run(app, host=host, port=port, access_log=access_log, log_level="info", server_header=False)

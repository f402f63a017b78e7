"""The app factory: one FastAPI app over one configuration, registry and store.

``create_app(settings)`` alone gives an app whose observability endpoints
answer ``503 UNAVAILABLE`` until ``app.state.datum.wire(registry, store)``;
passing ``registry`` and ``store`` wires it at once.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp

from datum.api import errors
from datum.api.authz import Authorizer
from datum.api.fastpath import DriftFastPath
from datum.api.guard import RequestGuard
from datum.api.metrics import metrics_registry
from datum.api.routes import buckets, hosts, meta, observability, ui
from datum.api.state import Clock, ServerState
from datum.api.tokens import TokenBook
from datum.config import Settings
from datum.reconcile.registry import Registry
from datum.reconcile.runner import utcnow
from datum.store import Store

DESCRIPTION = """\
Which items diverged, what desired and actual were, and why they are not converging;
hosts and their last passes; the desired state of the buckets example reconciler.

Every request but `/healthz`, `/readyz` and the page shell needs `Authorization: Bearer <token>`
and is decided by Cedar policies. Every error is `{"issues": [{"code", "message", ...}]}`.
"""


def create_app(
    settings: Settings,
    registry: Registry | None = None,
    store: Store | None = None,
    *,
    clock: Clock = utcnow,
    authorizer: Authorizer | None = None,
) -> FastAPI:
    """Build the app; tokens are the configured hashes, plus the store's once it is wired."""
    app = FastAPI(
        title="Datum",
        version="1",
        description=DESCRIPTION,
        docs_url="/docs",
        redoc_url=None,
    )
    state = ServerState(
        settings=settings,
        authorizer=authorizer or Authorizer.from_settings(settings.server.policy),
        tokens=TokenBook(settings.server.tokens, None),
        clock=clock,
    )
    if registry is not None and store is not None:
        state.wire(registry, store)
    app.state.datum = state
    app.state.metrics = metrics_registry(state)
    errors.install(app)
    for module in (observability, hosts, buckets, meta, ui):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(packages=[("datum.web", "static")]), name="static")
    _outermost(app, lambda inner: RequestGuard(DriftFastPath(inner, state), state))
    return app


def _outermost(app: FastAPI, wrap: Callable[[ASGIApp], ASGIApp]) -> None:
    """Put ``wrap`` around Starlette's whole middleware stack, error middleware included.

    The hot read it serves then costs what a bare ASGI app costs; everything it
    passes on meets the usual stack, so errors keep their one shape.
    """
    build = app.build_middleware_stack
    app.build_middleware_stack = lambda: wrap(build())  # type: ignore[method-assign]

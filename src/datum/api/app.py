"""The app factory: one FastAPI app over one configuration, registry and store.

``create_app(settings)`` alone gives an app whose observability endpoints
answer ``503 UNAVAILABLE`` until ``app.state.datum.wire(registry, store)``;
passing ``registry`` and ``store`` wires it at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from datum.api.front import errors, handlers
from datum.api.front.authz import Authorizer
from datum.api.front.edge import Edge
from datum.api.front.guard import RequestGuard
from datum.api.front.state import Clock, ServerState
from datum.api.front.tokens import TokenBook
from datum.api.metrics import metrics_registry
from datum.api.plugins import mount_plugins, schema_fragments
from datum.api.routes import (
    attention,
    audit,
    enroll,
    history,
    hosts,
    meta,
    observability,
    reboots,
    revisions,
    rollouts,
    ui,
)
from datum.config import Settings
from datum.fleet.server import FleetServer
from datum.reconcile.registry import Registry
from datum.reconcile.runner import utcnow
from datum.store import Store

DESCRIPTION = """\
Which items diverged, what desired and actual were, and why they are not converging;
hosts and their last passes; the desired state of the reconciler plugins that serve routes
(the buckets example reconciler's under `/v1/buckets`).

Every request but `/healthz`, `/readyz`, `/v1` (this API's endpoints), `/docs`, `/openapi.json`
and the page shell needs `Authorization: Bearer <token>` and is decided by Cedar policies. Every
error is `{"issues": [{"code", "message", ...}]}`. `HEAD` is answered wherever `GET` is, and a
trailing slash names the same resource as none.
"""

DOCS_ASSETS = "/docs/assets"


def create_app(
    settings: Settings,
    registry: Registry | None = None,
    store: Store | None = None,
    *,
    clock: Clock = utcnow,
    authorizer: Authorizer | None = None,
) -> FastAPI:
    """Build the app; tokens are the configured hashes, plus the store's once it is wired."""
    app = DatumApp(
        title="Datum",
        version="1",
        description=DESCRIPTION,
        docs_url=None,  # served below from a package's copy of Swagger UI: no CDN
        redoc_url=None,
        generate_unique_id_function=operation_id,  # every route's, the plugins' included
    )
    app.router.redirect_slashes = False  # Edge serves /v1/hosts/ as /v1/hosts, without a redirect
    from datum.plugins import load

    plugins = load()
    fragments = schema_fragments(plugins)
    state = ServerState(
        fleet=FleetServer(settings),
        authorizer=authorizer or Authorizer.from_settings(settings.server.policy, fragments.values()),
        tokens=TokenBook(
            settings.server.tokens, None, wall=clock, enrolled_only=settings.server.require_enrolled_agents
        ),
        clock=clock,
    )
    if registry is not None and store is not None:
        state.wire(registry, store)
    app.state.datum = state
    app.state.metrics = metrics_registry(state)
    handlers.install(app)
    for module in (observability, attention, hosts, history, audit, reboots, revisions, rollouts, enroll, meta, ui):
        app.include_router(module.router, responses=errors.error_responses(*errors.EVERYWHERE))
    state.broken_routes = mount_plugins(app, plugins, fragments)
    app.mount("/static", StaticFiles(packages=[("datum.web", "static")]), name="static")
    _docs(app)
    app.front = Edge(RequestGuard(app.framework, state, app.router.routes))
    return app


def operation_id(route: APIRoute) -> str:
    """An operation's ``operationId``, from its route's name: ``get_drift_report`` is ``getDriftReport``.

    The name a generated client gives the call, decided in one place: the route's ``name`` (its
    function's name unless the route sets one).
    """
    first, *rest = route.name.split("_")
    return first + "".join(word.capitalize() for word in rest)


class DatumApp(FastAPI):
    """FastAPI with Datum's outer layers in front of it: ``front`` meets every HTTP request first.

    ``front`` (``Edge``, then ``RequestGuard``: the front door, which admits
    every request and offers it to its route's fast answer) answers the hot
    requests before FastAPI's own ``__call__``, which on every request asks
    OpenTelemetry's providers whether its native telemetry is configured
    (environment lookups, ~8% of a cached manifest's CPU), and before
    Starlette's routing; everything it passes on goes to ``framework``
    (FastAPI's ``__call__``, error middleware and routes), so errors keep
    their one shape. Lifespan and WebSocket scopes go straight to FastAPI.
    """

    front: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        front = self.front
        if front is not None and scope["type"] == "http":
            await front(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)

    async def framework(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app as FastAPI serves it, without ``front``."""
        await super().__call__(scope, receive, send)


def _docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI) and the typed OpenAPI document, with no byte from the internet."""
    import fastapi_offline

    assets = Path(fastapi_offline.__file__).parent / "static"
    app.mount(DOCS_ASSETS, StaticFiles(directory=assets), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs(_request: Request) -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title="Datum API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
        )

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            app.openapi_schema = typed(document)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def typed(document: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's document with every error in the contract's shape.

    FastAPI documents a 422 of its own shape (``HTTPValidationError``) on every
    operation with parameters; the server answers ``Issues``, so that is what
    the document says, and the unused schemas go.
    """
    issues = {"$ref": "#/components/schemas/Issues"}
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            for status, response in operation.get("responses", {}).items():
                if status.isdigit() and int(status) >= 400:
                    response["content"] = {"application/json": {"schema": issues}}
    schemas = document.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    _integral(document)
    return document


_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _integral(node: Any) -> None:
    """An integer's bounds as integers again: FastAPI writes them as floats, and a client comparing
    ``seq`` with ``4.611686018427388e+18`` takes values above 2**62 the server refuses."""
    if isinstance(node, dict):
        if node.get("type") == "integer":
            for key in _BOUNDS:
                if isinstance(node.get(key), float) and node[key].is_integer():
                    node[key] = int(node[key])
        for value in node.values():
            _integral(value)
    elif isinstance(node, list):
        for value in node:
            _integral(value)

"""The web page: ``GET /`` (a shell that asks for a token) and ``GET /ui/overview`` (its data, as HTML).

The overview is rendered server-side (Jinja2) from the same models the JSON
API serves, behind the same bearer token and the same Cedar actions: the
page shows nothing its viewer could not read from the API.
"""

from __future__ import annotations

from functools import cache

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from datum.api.authz import Action
from datum.api.errors import error_responses
from datum.api.models import host_status
from datum.api.security import may, needs
from datum.api.state import state_of
from datum.core.humanize import age, when
from datum.core.vocab import DESCRIPTIONS, Reason
from datum.reconcile.report import DriftReport
from datum.store.hosts import list_hosts

router = APIRouter(tags=["page"])

# Scripts only from this server (the token lives in sessionStorage: no inline or foreign
# script may read it); inline styles are allowed for the coverage bars' widths.
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@cache
def templates() -> Environment:
    env = Environment(loader=PackageLoader("datum.web", "templates"), autoescape=select_autoescape(["html"]))
    env.globals.update(when=when, age=age, describe=_describe, stranded=_stranded)
    return env


def _describe(reason: Reason) -> str:
    return DESCRIPTIONS.get(reason, "")


def _stranded(report: DriftReport) -> int:
    return sum(1 for c in report.coverage if c.stranded)


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def page(request: Request) -> HTMLResponse:
    refresh = state_of(request).settings.server.refresh.total_seconds()
    html = templates().get_template("index.html").render(refresh_seconds=int(refresh))
    return HTMLResponse(html, headers=PAGE_HEADERS)


@router.get(
    "/ui/overview",
    response_class=HTMLResponse,
    include_in_schema=False,  # the page's own fragment, not an API
    summary="The page's data as an HTML fragment.",
    description=(
        "Cedar action `observability:ReadSubstrate` on `Server::\"datum\"`; the hosts section also needs "
        "`fleet:ReadHost` and is left out without it."
    ),
    responses=error_responses(401, 403, 503),
)
async def overview(request: Request, principal: str = Depends(needs(Action.READ_SUBSTRATE))) -> HTMLResponse:
    state = state_of(request)
    registry, store = state.wired()
    reports = [(await state.reports.get(name)).report for name in registry]
    hosts = [host_status(row) for row in list_hosts(store)] if may(request, principal, Action.READ_HOST) else None
    html = templates().get_template("overview.html").render(reports=reports, hosts=hosts)
    return HTMLResponse(html, headers=PAGE_HEADERS)

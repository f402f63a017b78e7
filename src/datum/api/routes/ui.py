"""The web page: ``GET /`` (a shell that asks for a token) and ``GET /ui/overview`` (its data, as HTML).

The overview is rendered server-side (Jinja2) from the same models the JSON
API serves, behind the same bearer token and the same Cedar actions: the
page shows nothing its viewer could not read from the API.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache, partial
from importlib.resources import files
from typing import Annotated, Literal
from urllib.parse import quote

import anyio.to_thread
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape
from pydantic import AfterValidator

from datum.api import attention
from datum.api.front.authz import Action, scope_of
from datum.api.front.errors import error_responses
from datum.api.front.security import may, needs, path_resource
from datum.api.front.state import state_of
from datum.api.models import PassSummary, host_summary, kept_reports_served
from datum.api.routes.hosts import cursor, cursor_query, one_host
from datum.api.routes.reboots import HostParam
from datum.api.routes.revisions import rollout
from datum.api.routes.rollouts import rollout_list
from datum.config import Settings
from datum.core.explain import ACT_LABEL, Act
from datum.core.humanize import age, when
from datum.core.vocab import HostState
from datum.fleet import listing
from datum.fleet.history import Window, events_page, passes_page
from datum.fleet.rollouts import canaries
from datum.fleet.rollouts.status import ORIGINS_ON_PAGE, Rollout, acted
from datum.reconcile.registry import Registry
from datum.reconcile.report import DriftReport, enabled
from datum.store import Store
from datum.store.history import HOST, RECONCILER, STRIP, first_seen_many, recent, recent_many
from datum.store.leases import Leases
from datum.store.leases import read as read_leases
from datum.store.passes import kept_reports
from datum.web import view as v

router = APIRouter(tags=["page"])

KEPT_SHOWN = 20  # kept passes listed on a host's page, newest first (GET /v1/hosts/{host}/passes has them all)

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
    env.globals.update(
        when=when, age=age, act_label=ACT_LABEL, history_passes=STRIP, act_badge=v.act_badge, act_none=Act.NONE,
        host_href=v.host_href, overview_href=v.overview_href, event_word=v.event_word, change_windows=v.CHANGE_WINDOWS, rollout_acted=acted,
    )
    env.filters["wbr"] = _breakable
    return env


_SEPARATORS = re.compile(r"([/\[\].:_-])")


def _breakable(text: str) -> Markup:
    """``text`` escaped, with a word-break opportunity after each separator: an id wraps there, not mid-word."""
    return Markup(_SEPARATORS.sub(lambda m: f"{m.group(1)}<wbr>", str(escape(text))))


@dataclass(frozen=True)
class HostsShown:
    """Which hosts the page lists: one state's page (``state``, ``after``), or without a state the worst first."""

    state: str | None = None
    after: str | None = None
    groups: frozenset[str] | None = None  # a token scoped to host groups: their hosts only (None: every host)


def _hosts(store: Store, settings: Settings, shown: HostsShown) -> listing.Page:
    """The listing's page of hosts the page shows (a host whose agent fell silent reads unknown, as in /v1/hosts)."""
    if shown.state is None:
        return attention.worst_hosts(store, settings, groups=shown.groups)
    silent, now = settings.fleet.stale_after, datetime.now(UTC)
    return listing.page(store, silent, now, state=shown.state, after=shown.after, limit=v.MAX_HOSTS, groups=shown.groups)


def _changes(store: Store, window: str, now: datetime, groups: frozenset[str] | None = None) -> v.Changes:
    """The fleet's events in ``window`` (``1h`` or ``1d``), newest first: what ``GET /v1/events`` answers (of
    ``groups``' hosts only, when given)."""
    since = now - v.CHANGE_WINDOWS[window][1]
    found = events_page(store, Window(since=since), limit=v.CHANGES_SHOWN, groups=groups)
    return v.Changes(window, found.rows, found.next is not None)


def _view(
    reports: list[DriftReport], registry: Registry, settings: Settings, store: Store, shown: HostsShown | None,
    changes: str | None = None,
    revisions: Callable[[], Rollout] | None = None,
    groups: frozenset[str] | None = None,
) -> v.Overview:
    """The page's view: the reports with their history, *Needs a human* as ``GET /v1/attention`` decides it,
    and (when readable) a page of hosts with theirs and the fleet's timeline of ``changes`` (``1h``, ``1d``).

    The reads that open a connection of their own (the hosts, the leases, the timeline) come first: a request never
    holds one connection while it waits for another, which under a storm of page loads is how every
    request ends up holding one and waiting for a second that never frees (the pool runs dry)."""
    found = worst = leases = None
    if shown is not None:
        found = _hosts(store, settings, shown)
        worst = found if shown.state is None else attention.worst_hosts(store, settings, groups=shown.groups)
        leases = read_leases(store, groups=shown.groups)
    timeline = _changes(store, changes, datetime.now(UTC), groups) if changes is not None else None
    by_revision = revisions() if revisions is not None and shown is not None else None
    views = []
    broken = [(b.name, b.error) for b in registry.broken]
    with store.connect() as conn:
        for report in reports:
            name = report.reconciler
            since = first_seen_many(conn, RECONCILER, name, (i.streak for i in report.items))
            views.append(
                v.reconciler_view(
                    report, registry.settings(settings, name), recent(conn, RECONCILER, name), since.get,
                    enabled(registry, settings, name),
                )
            )
        if shown is None or found is None or leases is None:
            return v.overview(
                views, None, None, attention.needs(registry, settings, reports, None).lines, broken=broken,
                changes=timeline,
            )
        decided = attention.needs(registry, settings, reports, worst, leases, store)
        listed = [host_summary(row) for row in found.hosts]
        strips = recent_many(conn, HOST, [h.host for h in listed])
        hosts = [v.host_view(h, strips[h.host], decided.lines) for h in listed]
    from datum.fleet.reboots import block_shown, waiting_in_order

    return v.overview(
        views, hosts, found.counts, decided.lines, v.HostsPage(shown.state, found.next), _rebooting(leases),
        settings.fleet.reboot_concurrency, broken, decided.hosts_not_listed, timeline, by_revision,
        reboot_blocked=block_shown(settings.fleet), reboot_waiting=waiting_in_order(settings.fleet, leases),
    )


def _rebooting(leases: Leases) -> list[v.Rebooting]:
    """The hosts holding a reboot lease, then those past its timeout (``datum.store.leases``)."""
    return [
        v.Rebooting(x.host, x.group, x.since, x.expires_at, overdue=not x.live(leases.now), unhealthy=x.unhealthy)
        for x in [*leases.rebooting, *leases.overdue]
    ]


def _shell(request: Request, view_url: str, title: str, api: str, back: bool = False) -> HTMLResponse:
    """The page's shell: asks for a token once, then shows ``view_url`` (a fragment below) with it."""
    refresh = state_of(request).settings.server.refresh.total_seconds()
    html = templates().get_template("index.html").render(
        refresh_seconds=int(refresh), view_url=view_url, title=title, api_hint=api, back=back
    )
    return HTMLResponse(html, headers=PAGE_HEADERS)


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def page(request: Request) -> HTMLResponse:
    return _shell(request, "/ui/overview", "Datum", "/v1/attention")


@router.get("/hosts/{host}", response_class=HTMLResponse, include_in_schema=False)
def host_page(request: Request, host: str = HostParam) -> HTMLResponse:
    """A host's own page (every host name on the overview links here): its data comes from ``/ui/hosts/{host}``."""
    name = quote(host, safe="")
    return _shell(request, f"/ui/hosts/{name}", f"Datum: {host}", f"/v1/hosts/{name}", back=True)


@router.get(
    "/ui/hosts/{host}",
    response_class=HTMLResponse,
    include_in_schema=False,  # the host page's own fragment, not an API
    summary="A host's page as an HTML fragment.",
    description="Cedar action `fleet:ReadHost` on `Host::\"{host}\"`, as `GET /v1/hosts/{host}`; 404 for a host "
    "that never reported.",
    responses=error_responses(401, 403, 404, 503),
)
async def host_fragment(
    request: Request,
    host: str = HostParam,
    principal: str = Depends(needs(Action.READ_HOST, path_resource("Host", "host"))),
) -> HTMLResponse:
    state = state_of(request)
    _registry, store = state.wired()
    history = may(request, principal, Action.READ_HISTORY, ("Host", host))

    def read() -> tuple[v.HostPage, list[v.KeptPass] | None]:
        status = one_host(state, host)
        with store.connect() as conn:
            passes = recent(conn, HOST, host)
        ro = canaries.attention_of(store, state.settings.fleet.rollout is not None)
        page = v.host_page(status, passes, [x.as_json() for x in read_leases(store, host).overdue], ro)
        if not history:
            return page, None
        rows = [PassSummary.model_validate(r) for r in passes_page(store, host, limit=KEPT_SHOWN).rows]
        reports = kept_reports_served(kept_reports(store, {r.digest for r in rows if r.digest}))
        return page, v.kept_passes(rows, reports)

    view, kept = await anyio.to_thread.run_sync(read)
    html = templates().get_template("host.html").render(page=view, kept=kept, kept_shown=KEPT_SHOWN)
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
async def overview(
    request: Request,
    hosts: HostState | None = Query(default=None, description="List only the hosts that read this state."),
    after: Annotated[str | None, cursor_query("The hosts' next page."), AfterValidator(cursor)] = None,
    changes: Literal["1h", "1d"] = Query(default="1h", description="The window of the fleet's timeline."),
    principal: str = Depends(needs(Action.READ_SUBSTRATE)),
) -> HTMLResponse:
    state = state_of(request)
    registry, store = state.wired()
    reports = [(await state.reports.get(name)).report for name in registry]
    groups = scope_of(principal)  # a token scoped to host groups: their hosts only, in every read below
    readable = may(request, principal, Action.READ_HOST)
    shown = HostsShown(hosts.value if hosts else None, after, groups) if readable else None
    window = changes if may(request, principal, Action.READ_HISTORY) else None  # the timeline, or left out
    by_revision = partial(rollout, state, origins=ORIGINS_ON_PAGE) if shown is not None else None  # hosts per revision
    view = await anyio.to_thread.run_sync(
        _view, reports, registry, state.settings, store, shown, window, by_revision, groups
    )
    if shown is not None and state.settings.fleet.rollout is not None:  # the staged rollout in force, its waves
        staged = (await anyio.to_thread.run_sync(rollout_list, store, state.settings.fleet, 1, groups)).rollouts
        view.staged = staged[0] if staged else None
    html = templates().get_template("overview.html").render(view=view)
    return HTMLResponse(html, headers=PAGE_HEADERS)


_FAVICON = files("datum.web").joinpath("static", "favicon.svg")


@router.get("/favicon.ico", include_in_schema=False)
def favicon() -> Response:
    """Browsers ask for it whatever the page links: the same SVG as ``/static/favicon.svg``."""
    return Response(_FAVICON.read_bytes(), media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})

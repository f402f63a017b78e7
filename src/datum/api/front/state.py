"""What the app serves from: the fleet server, the authorizer, tokens, and (once wired) the registry and store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from fastapi import Request

from datum.api.front.authz import Authorizer
from datum.api.front.gate import ReadGate
from datum.api.front.hostgroups import HostGroups
from datum.api.front.tokens import TokenBook
from datum.api.reports import ReportCache
from datum.config import Settings
from datum.core.findings import ErrorCode, Problem
from datum.fleet.server import FleetServer
from datum.fleet.tls import Served
from datum.reconcile.registry import Registry
from datum.reconcile.report import DriftReport, drift_report
from datum.store import Store

Clock = Callable[[], datetime]


@dataclass
class ServerState:
    """The one object the routes read; ``registry`` and ``store`` are None until wired.

    The settings and the store are the fleet server's (``fleet``: what the fleet's routes hand down to
    ``datum.fleet``), one object for both.
    """

    fleet: FleetServer
    authorizer: Authorizer
    tokens: TokenBook
    clock: Clock
    registry: Registry | None = None
    reports: ReportCache = field(init=False)
    # People's reads served at once ([server] read_slots), the rest queued or shed (datum.api.front.gate).
    reads: ReadGate = field(init=False)
    # Plugins whose routes or Cedar fragment could not be served: {plugin: why}.
    broken_routes: dict[str, str] = field(default_factory=dict)
    # The certificate datum serve presents (datum.fleet.tls), as loaded at start and by each SIGHUP; None: HTTP.
    tls: Served | None = None
    # Each host's recorded group, for the decisions of tokens scoped to host groups.
    host_groups: HostGroups = field(init=False)
    # Wakes the thread that asks the approval hook about pending enrollments (datum.fleet.approvals); None: no hook.
    ask_approval: Callable[[], None] | None = None

    @property
    def settings(self) -> Settings:
        return self.fleet.settings

    @settings.setter
    def settings(self, settings: Settings) -> None:
        self.fleet.settings = settings

    @property
    def store(self) -> Store | None:
        return self.fleet.store

    def __post_init__(self) -> None:
        self.reports = ReportCache(self._report, ttl=self.settings.server.report_ttl.total_seconds())
        server = self.settings.server
        self.reads = ReadGate(server.read_slots, server.read_wait.total_seconds())
        self.host_groups = HostGroups(lambda: self.fleet.store)

    def wire(self, registry: Registry, store: Store) -> None:
        """Make the observability endpoints answer: until now they are 503 UNAVAILABLE."""
        self.tokens.attach(store)
        self.fleet.store = store
        self.registry = registry
        self.reports.invalidate()

    @property
    def ready(self) -> bool:
        return self.registry is not None and self.store is not None

    def wired(self) -> tuple[Registry, Store]:
        """The registry and the store, or ``503 UNAVAILABLE`` before they are wired."""
        if self.registry is None or self.store is None:
            raise Problem.one(ErrorCode.UNAVAILABLE, "the server is starting: the reconciler registry is not wired yet")
        return self.registry, self.store

    def known(self, name: str) -> Registry:
        """The registry, once ``name`` is known to be a registered reconciler (else 404)."""
        registry, _store = self.wired()
        registry.entry(name)  # raises NOT_FOUND naming the registered ones
        return registry

    def _report(self, name: str) -> DriftReport:
        registry, store = self.wired()
        return drift_report(registry, self.settings, store, name, self.clock())


def state_of(request: Request) -> ServerState:
    state: ServerState = request.app.state.datum
    return state

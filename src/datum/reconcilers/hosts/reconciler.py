"""The ``hosts`` reconciler: the hosts an operator declared against the hosts whose agents report.

Desired: the inventory (``datum.fleet.inventory``): ``nodes.yaml`` rules with
``expected: true`` and the hosts of ``[reconcilers.hosts] inventory``. Actual:
the hosts that report, that is whose last report is not stale by ``[fleet]
stale_after`` (the rule the host listing applies: one truth, ``datum.store.hosts``).

- **restore**, a declared host that does not report: it never did
  (``hosts.never_reported``) or went silent (``hosts.silent``). Nothing Datum
  does brings a host back, so the action is the verdict itself: after
  ``confirmation_ticks`` passes (one missed interval is not an alarm) the item
  names why and since when. When more are missing at once than the restore
  breaker allows (default: more than 5) they read ``circuit_breaker`` instead:
  many hosts gone at once is a partition (of the network, or of the server from
  the fleet), not many separate failures, and is looked at as one.
- **reap**, a host that reports without being declared (a stray, or a typo in
  a name). With ``no_reap`` (the default) it reads ``suppressed_no_reap``:
  reported, nothing done. With ``no_reap = false``, once confirmed and within
  the reap breaker, the agent tokens bound to it are revoked (their rows
  deleted: every server refuses them within ``datum.api.front.tokens.RECHECK``
  seconds) and the revocation recorded in ``hosts_revoked``. A host whose last
  report came before its revocation is reaped and left to fall silent; one that
  reports after it, or holds no token bound to it, speaks with a token not bound
  to it, which only an operator can find: ``blocked_on_owner``.

Nothing declared at all: missing and stray cannot be told apart, so no item is
reported (``itemsReported`` false) and the health is ``degraded`` saying what to
declare. An inventory that cannot be read fails the pass; it is never read as
empty (which would be every host a stray), and an inventory file that lists no
host trips the reap breaker (``allow_empty``). Coverage: the hosts by the state
they read, every one of them selected.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import Field, PrivateAttr, ValidationInfo, model_validator

from datum.sdk import (
    BlockedOnOwner,
    Branch,
    BreakerSettings,
    CoverageDecl,
    Direction,
    HostState,
    PassContext,
    Problem,
    ReconcilerSettings,
    Result,
    Store,
    SubstrateError,
    UTCDateTime,
    Waiting,
    age,
    when,
)
from datum.sdk.fleet import (
    Declared,
    FleetSettings,
    Sighting,
    declared,
    revoke_host_tokens,
    sightings,
)

NAME = "hosts"
KIND = "host"
BRANCH = Branch.of_plugin(NAME, Path(__file__).parent / "migrations")
NEVER_REPORTED, SILENT = f"{NAME}.never_reported", f"{NAME}.silent"
RESTORE_BREAKER = 5  # declared hosts missing at once, past which they are one partition, not many failures

metadata = sa.MetaData()
# Migration hosts_0001: one row per undeclared host whose bound tokens this reconciler revoked, the latest time.
revoked = sa.Table(
    "hosts_revoked",
    metadata,
    sa.Column("host", sa.String(253), primary_key=True),
    sa.Column("revoked_at", UTCDateTime, nullable=False),
    sa.Column("tokens", sa.Integer, nullable=False),
    # The host's last report when they were revoked (the server's time of receipt): a later one is another token's.
    sa.Column("last_report_at", UTCDateTime),
)

# Every host state is a status this reconciler looks at: none is stranded, the histogram is the fleet's.
COVERAGE = CoverageDecl(KIND, selected=frozenset(s.value for s in HostState))

NOTHING_DECLARED = (
    "no host is declared (nodes.yaml rules with `expected: true`, or [reconcilers.hosts] inventory): "
    "which hosts are missing and which report without being declared cannot be told"
)


class HostsSettings(ReconcilerSettings):
    """The ``[reconcilers.hosts]`` section: the common settings and an inventory file.

    On with the fleet (``[fleet] manifests``) or an inventory, off otherwise; ``no_reap`` is on,
    so a stray host is reported and its tokens revoked only when ``no_reap = false``; the restore
    breaker holds more than ``RESTORE_BREAKER`` missing hosts at once. The fleet directory and
    ``stale_after`` are ``[fleet]``'s, so this reconciler and the host listing agree on who is silent.
    """

    enabled: bool = False
    inventory: Path | None = Field(
        default=None, description="A YAML file `hosts: [name, ...]` of declared hosts; relative to the fleet directory."
    )
    no_reap: bool = True
    breaker: BreakerSettings = BreakerSettings(restore=RESTORE_BREAKER)  # type: ignore[arg-type]
    _fleet: FleetSettings = PrivateAttr(default_factory=FleetSettings)

    @model_validator(mode="before")
    @classmethod
    def _with_the_fleet(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        settings = (info.context or {}).get("settings")
        if "enabled" not in data and settings is not None:
            data = {**data, "enabled": settings.fleet.manifests is not None or data.get("inventory") is not None}
        breaker = data.get("breaker")
        if isinstance(breaker, dict) and "restore" not in breaker:  # a table that leaves restore out keeps this one's
            data = {**data, "breaker": {**breaker, "restore": RESTORE_BREAKER}}
        return data

    @model_validator(mode="after")
    def _fleet_section(self, info: ValidationInfo) -> HostsSettings:
        settings = (info.context or {}).get("settings")
        if settings is not None:
            self._fleet = settings.fleet
        return self

    @property
    def fleet(self) -> FleetSettings:
        """The ``[fleet]`` section this reconciler was configured with."""
        return self._fleet


@dataclass(frozen=True, slots=True)
class Wanted:
    """A declared host, and the last the server heard of it (None: never)."""

    declared: Declared
    seen: Sighting | None


def describe_desired(want: Wanted) -> str:
    heard = "never reported" if want.seen is None else f"last report received {when(want.seen.received_at)}"
    return f"declared in {want.declared.where}; {heard}"


class HostsReconciler:
    """Converges nothing on the hosts: says which declared hosts are missing and which report undeclared."""

    name = NAME

    def __init__(self, settings: HostsSettings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self._ctx: PassContext | None = None
        self._revoked: dict[str, tuple[datetime, datetime | None]] = {}  # host: (revoked at, its last report then)
        store.require(BRANCH)

    def run(self, ctx: PassContext) -> Result | None:
        fleet = self.settings.fleet
        try:
            inventory = declared(fleet.manifests, self.settings.inventory)
        except Problem as exc:
            raise SubstrateError(f"cannot read the inventory: {exc.plain()}") from exc
        seen = sightings(self.store, fleet.stale_after, ctx.now)
        ctx.report_coverage(COVERAGE, _histogram(seen, ctx.now))
        if inventory is None:
            return Result.degraded(NOTHING_DECLARED)
        with self.store.connect() as conn:
            self._revoked = {
                r.host: (r.revoked_at, r.last_report_at)
                for r in conn.execute(sa.select(revoked.c.host, revoked.c.revoked_at, revoked.c.last_report_at))
            }
        by_host = {s.host: s for s in seen}
        wanted = {host: Wanted(d, by_host.get(host)) for host, d in inventory.items()}
        actual = {s.host: s for s in seen if not s.stale and not self._reaped(s)}
        self._ctx = ctx
        try:
            ctx.converge(
                KIND,
                wanted,
                actual,
                self.apply,
                equal=lambda want, have: True,
                describe=describe_desired,
            )
        finally:
            self._ctx = None
        return None

    def _reaped(self, seen: Sighting) -> bool:
        """Whether this host's bound tokens were revoked since its last report: left to fall silent.

        Compared on the report's own time of receipt, as recorded at the revocation, so that no two
        clocks (a replica's, the pass's) are ever compared."""
        then = self._revoked.get(seen.host)
        return then is not None and then[1] is not None and seen.received_at is not None and seen.received_at <= then[1]

    def apply(self, direction: Direction, host: str, want: Wanted | None, have: Sighting | None) -> None:
        if direction is Direction.RESTORE and want is not None:
            raise self._missing(host, want)
        if direction is Direction.REAP and have is not None:
            self._revoke(host, have)
            return
        raise RuntimeError(f"host {host}: no {direction.value} is defined")  # align: equal is always true

    def _missing(self, host: str, want: Wanted) -> Waiting:
        where = f"declared in {want.declared.where}"
        s = want.seen
        if s is None:
            return Waiting(NEVER_REPORTED, f"{host} is {where} and no report from it has reached the server")
        assert self._ctx is not None
        # The stale rule's own clock: when the agent says its last pass finished.
        last = s.finished_at or s.received_at
        ago = "" if last is None else f" {age((self._ctx.now - last).total_seconds())} ago"
        interval = f", its interval {age(s.interval_seconds)}" if s.interval_seconds else ""
        return Waiting(
            SILENT,
            f"{host} is {where}; its last pass finished{ago}{interval}: silent for more than "
            f"{self.settings.fleet.stale_after:g} of its intervals",
        )

    def _revoke(self, host: str, seen: Sighting) -> None:
        """Revoke the agent tokens bound to ``host`` and record it, fenced; blocked on its owner when there are none."""
        if self._ctx is None:
            raise RuntimeError("tokens are revoked only during a pass")
        with self._ctx.begin() as conn:
            gone = revoke_host_tokens(conn, host)
            if gone:
                conn.execute(sa.delete(revoked).where(revoked.c.host == host))
                conn.execute(sa.insert(revoked).values(
                    host=host, revoked_at=self._ctx.now, tokens=gone, last_report_at=seen.received_at
                ))
        if gone:
            return
        before = self._revoked.get(host)
        if before is not None:
            raise BlockedOnOwner(
                f"{host} reported at {when(seen.received_at)}, after its bound tokens were revoked at {when(before[0])}: "
                "it speaks with a token not bound to it; find that token with datum token list and revoke it"
            )
        raise BlockedOnOwner(
            f"{host} holds no token bound to it: it reports with an unbound one; bind agent tokens to their hosts "
            "(datum token create --host) so that a stray can be revoked alone"
        )


def _histogram(seen: list[Sighting], now: datetime) -> dict[str, tuple[int, float]]:
    """Hosts by the state they read, with the age of the oldest last report among them."""
    counts: dict[str, tuple[int, float]] = {}
    for s in seen:
        n, oldest = counts.get(s.state, (0, 0.0))
        heard = 0.0 if s.received_at is None else (now - s.received_at).total_seconds()
        counts[s.state] = (n + 1, max(oldest, heard))
    return counts

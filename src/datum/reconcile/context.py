"""The pass context a reconciler runs in: its settings, the store, the tick's time, and ``converge``.

A bespoke reconciler, which computes its own diff, reports what it found with
``report_items`` (its items get streaks from the same item memory) and
``report_coverage``; one that reports neither reads ``itemsReported: false``.

It is also where a pass is fenced and stopped: ``begin()`` checks the pass's
claim before any write (``LostClaim`` when it was overtaken), and ``converge``
applies no further item once the process is asked to stop or the claim is
lost; items not reached keep the memory the last executed pass left them.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa

from datum.config import ReconcilerSettings
from datum.core.converge import ApplyFn, Converge, ItemReport, PassResult, SettleFn, parked, retain
from datum.core.coverage import CoverageDecl, CoverageRow, histogram
from datum.core.errors import Waiting
from datum.core.memory import ItemMemory
from datum.core.vocab import AnyReason, Direction, PluginReason, Reason, registered
from datum.reconcile.desired import set_status
from datum.store import Store
from datum.store.memory import load_memory
from datum.store.runs import LostClaim

__all__ = ["Item", "LostClaim", "PassContext", "PassStopped", "SubstrateError"]

log = logging.getLogger("datum.reconcile")

D = TypeVar("D")
A = TypeVar("A")


class SubstrateError(Exception):
    """Desired or actual state could not be read: the pass fails as a whole.

    Raise it (or let any exception escape ``run``) rather than return an empty
    actual set: an unreadable substrate must never look like an empty one,
    which would reap everything.
    """


class PassStopped(Exception):
    """The process was asked to stop before this kind was converged: the pass ends here."""


class _NotReached(Exception):
    """Raised in place of an apply the pass did not get to (stopping, or the claim lost)."""


Fence = Callable[[sa.Connection], None]


@dataclass(frozen=True)
class Item:
    """One diverged item a bespoke reconciler found, and why it is not converging.

    ``reason`` must be registered (the contract's, or the plugin's own
    ``namespace.name``); ``failures``/``retry_after_passes`` apply to
    ``backoff`` and ``apply_failed``.
    """

    direction: Direction | str
    id: str
    reason: AnyReason | str
    last_err: str | None = None
    desired: str | None = None
    actual: str | None = None
    failures: int | None = None
    retry_after_passes: int | None = None


_FAILING = frozenset({Reason.BACKOFF, Reason.APPLY_FAILED})


@dataclass
class PassContext:
    """Everything one executed pass of one reconciler needs."""

    reconciler: str
    settings: ReconcilerSettings
    store: Store
    now: datetime
    first_pass: bool
    results: list[PassResult] = field(default_factory=list)
    memories: dict[str, dict[str, ItemMemory]] = field(default_factory=dict)
    # Checks, first thing in every write transaction, that the pass still holds its claim.
    fence: Fence | None = None
    # True once the pass must apply nothing more (SIGTERM, scheduler stopping, claim lost).
    should_stop: Callable[[], bool] | None = None
    # Set when an apply was left out because the pass was stopping.
    stopped: bool = False
    # Coverage a bespoke reconciler measured itself (report_coverage); None: it reported none.
    coverage: list[CoverageRow] | None = None
    # Reasons of another plugin's namespace this pass reported (``own``): the health says so.
    borrowed: set[str] = field(default_factory=set)

    def own(self, reason: AnyReason) -> AnyReason:
        """``reason`` if it is the seed's or this reconciler's own; otherwise ``unexpected_value``,
        remembered in ``borrowed``. A plugin registers reasons in its own namespace, which the scan
        at load checks in its source; a reason built at run time is checked here, when reported."""
        if isinstance(reason, PluginReason) and reason.namespace != self.reconciler:
            self.borrowed.add(reason.value)
            return Reason.UNEXPECTED_VALUE
        return reason

    def _borrowed(self, exc: Waiting) -> Waiting:
        """The item's ``Waiting`` with its reason checked (``own``)."""
        if self.own(exc.reason) is exc.reason:
            return exc
        owner = exc.reason.partition(".")[0]
        return Waiting(Reason.UNEXPECTED_VALUE, f"reported {exc.reason}, a reason of {owner}, not {self.reconciler}'s: {exc}")

    @property
    def items_reported(self) -> bool:
        """Whether this pass reported items (``converge`` or ``report_items``)."""
        return bool(self.memories)

    def stopping(self) -> bool:
        return self.should_stop is not None and self.should_stop()

    @contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        """A transaction for a reconciler's own writes during this pass (desired-state status).

        Every write a pass makes goes through here, so that a pass which lost
        its claim on the reconciler cannot write: the fence runs first, in the
        same transaction, and raises ``LostClaim`` (nothing is written).
        """
        with self.store.begin() as conn:
            if self.fence is not None:
                self.fence(conn)
            yield conn

    def compare_and_set(self, table: sa.Table, key: str, read: str, status: str, **options: Any) -> bool:
        """Move one desired-state row from the status this pass read to ``status``, fenced; whether it moved.

        Nothing is written when ``read == status`` or when someone moved the
        row meanwhile (a tenant's delete during the pass is never overwritten).
        ``options`` are ``set_status``'s (``key_column``, ``status_column``, ...).
        """
        if read == status:
            return False
        with self.begin() as conn:
            moved = set_status(conn, table, key, status, {read}, **options)
        if not moved:
            log.info("%s %s left as it is: no longer %s, so not moved to %s", table.name, key, read, status)
        return moved

    def converge(
        self,
        kind: str,
        desired: Mapping[str, D],
        actual: Mapping[str, A],
        apply: ApplyFn[D, A],
        *,
        equal: Callable[[D, A], bool] | None = None,
        tombstone: Callable[[D], bool] | None = None,
        describe: Callable[[D], str] | None = None,
        describe_actual: Callable[[A], str] | None = None,
        prerequisite: Callable[[], str | None] | None = None,
        unsettled: Callable[[D], bool] | None = None,
        settle: SettleFn[D, A] | None = None,
    ) -> PassResult:
        """Run Converge for one kind with this reconciler's settings and remembered items.

        The new item memory is persisted by the runner when the whole pass completes.
        Once the pass is stopping, the item being applied finishes and no other
        is applied; those not reached keep their remembered state.
        """
        if kind in self.memories:
            raise ValueError(f"kind {kind!r} converged twice in one pass")
        if self.stopping():
            self.stopped = True
            raise PassStopped(f"stopped before converging {kind}")
        not_reached: set[str] = set()

        def reached(key: str) -> None:
            if self.stopping():
                not_reached.add(key)
                raise _NotReached(key)

        def guarded(direction: Direction, key: str, want: D | None, have: A | None) -> None:
            reached(key)
            try:
                apply(direction, key, want, have)
            except Waiting as exc:
                raise self._borrowed(exc) from None

        def guarded_settle(key: str, want: D, have: A | None) -> None:
            reached(key)
            assert settle is not None
            try:
                settle(key, want, have)
            except Waiting as exc:
                raise self._borrowed(exc) from None

        engine: Converge[D, A] = Converge(
            kind,
            self.settings.converge_config(),
            equal=equal or operator.eq,
            tombstone=tombstone,
            describe=describe,
            describe_actual=describe_actual,
            prerequisite=prerequisite,
            unsettled=unsettled,
            settle=None if settle is None else guarded_settle,
        )
        with self.store.connect() as conn:
            before = load_memory(conn, self.reconciler, kind)
        result = engine.run(desired, actual, guarded, before)
        if not_reached:
            result = self._unreached(result, not_reached, before)
        self.results.append(result)
        self.memories[kind] = result.memory
        return result

    def report_items(self, kind: str, items: Iterable[Item]) -> PassResult:
        """Report the diverged items of ``kind`` a bespoke reconciler found on this pass.

        Every item it does not report is converged. Streaks come from the
        item memory, as for ``converge``; an unregistered reason raises
        ``ValueError`` (the pass fails and says so).
        """
        if kind in self.memories:
            raise ValueError(f"kind {kind!r} reported twice in one pass")
        with self.store.connect() as conn:
            before = load_memory(conn, self.reconciler, kind)
        needed = self.settings.confirmation_ticks
        reports: list[ItemReport] = []
        memory: dict[str, ItemMemory] = {}
        for item in items:
            direction = Direction(item.direction)
            said = registered(str(item.reason))
            reason = self.own(said)
            last_err = item.last_err
            if reason is not said:
                last_err = f"reported {said}, a reason of {said.partition('.')[0]}, not {self.reconciler}'s: {item.last_err or ''}".rstrip(": ")
            if item.id in memory:
                raise ValueError(f"item {kind}/{item.id} reported twice")
            prior = before.get(item.id)
            mem = prior.seen_again(direction) if prior else ItemMemory.first(direction)
            failing = reason in _FAILING
            mem = dataclasses.replace(
                mem,
                failures=(item.failures or 1) if failing else 0,
                last_err=last_err,
                retry_after_passes=(item.retry_after_passes or 0) if failing else 0,
            )
            memory[item.id] = mem
            reports.append(
                ItemReport(
                    kind=kind,
                    direction=direction,
                    id=item.id,
                    streak=mem.streak,
                    confirmations_needed=needed,
                    reason=reason,
                    last_err=last_err,
                    desired=item.desired,
                    actual=item.actual if direction is Direction.ALIGN else None,
                    failures=mem.failures if failing else None,
                    retry_after_passes=mem.retry_after_passes if failing else None,
                )
            )
        reasons = Counter(r.reason for r in reports)
        blocked = reasons[Reason.BLOCKED_ON_OWNER]
        kept, dropped = retain(reports, self.settings.drift_cap)
        result = PassResult(
            kind=kind,
            items=tuple(kept),
            dropped=dropped,
            drift=len(reports) - blocked,
            blocked=blocked,
            memory=memory,
            reasons=reasons,
            tripped=frozenset(),
            by_direction=Counter((r.reason, r.direction) for r in reports),
        )
        self.results.append(result)
        self.memories[kind] = memory
        return result

    def report_coverage(self, decl: CoverageDecl, counts: Mapping[str, int | tuple[int, float]]) -> None:
        """Report the status histogram of one kind a bespoke reconciler measured itself.

        ``counts`` maps a status to its row count, or to (count, age of its
        oldest row in seconds). It is shown until the next completed pass.
        """
        pairs = {k: (v, 0.0) if isinstance(v, int) else (int(v[0]), float(v[1])) for k, v in counts.items()}
        self.coverage = [*(self.coverage or []), *histogram(decl, pairs)]

    def _unreached(
        self, result: PassResult, keys: set[str], before: Mapping[str, ItemMemory]
    ) -> PassResult:
        """Items the stopping pass did not attempt: not failed, and what it saw of them forgotten."""
        self.stopped = True
        memory = dict(result.memory)
        for key in keys:
            if key in before:
                memory[key] = before[key]
            else:
                memory.pop(key, None)
        # Converge counted each as apply_failed (the guard raised in its place): uncount them.
        reasons = Counter(result.reasons)
        reasons[Reason.APPLY_FAILED] -= len(keys)
        by_direction = Counter(result.by_direction)
        policy = self.settings.converge_config().backoff
        for key in keys:
            by_direction[(Reason.APPLY_FAILED, result.memory[key].direction)] -= 1
        at_cap = result.at_backoff_cap - sum(
            1 for key in keys if parked(Reason.APPLY_FAILED, result.memory[key], policy)
        )
        return dataclasses.replace(
            result,
            memory=memory,
            items=tuple(i for i in result.items if i.id not in keys),
            reasons=+reasons,
            by_direction=+by_direction,
            at_backoff_cap=at_cap,
        )

"""The pass context a reconciler runs in: its settings, the store, the tick's time, and ``converge``."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

import sqlalchemy as sa

from datum.config import ReconcilerSettings
from datum.core.converge import ApplyFn, Converge, PassResult
from datum.core.memory import ItemMemory
from datum.store import Store
from datum.store.memory import load_memory

D = TypeVar("D")
A = TypeVar("A")


class SubstrateError(Exception):
    """Desired or actual state could not be read: the pass fails as a whole.

    Raise it (or let any exception escape ``run``) rather than return an empty
    actual set: an unreadable substrate must never look like an empty one,
    which would reap everything.
    """


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

    @contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        """A transaction for a reconciler's own writes during this pass (desired-state status).

        Every write a pass makes goes through here, so that a pass which lost
        its claim on the reconciler cannot write (the runner's fencing check).
        """
        with self.store.begin() as conn:
            yield conn

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
    ) -> PassResult:
        """Run Converge for one kind with this reconciler's settings and remembered items.

        The new item memory is persisted by the runner when the whole pass completes.
        """
        if kind in self.memories:
            raise ValueError(f"kind {kind!r} converged twice in one pass")
        engine: Converge[D, A] = Converge(
            kind,
            self.settings.converge_config(),
            equal=equal or operator.eq,
            tombstone=tombstone,
            describe=describe,
            describe_actual=describe_actual,
            prerequisite=prerequisite,
        )
        with self.store.connect() as conn:
            before = load_memory(conn, self.reconciler, kind)
        result = engine.run(desired, actual, apply, before)
        self.results.append(result)
        self.memories[kind] = result.memory
        return result

"""``datum.sdk``: the one import a plugin needs. Everything else in Datum is private and may change.

Versioned by ``API_VERSION``: within a version names are only added, never
changed or removed; a plugin declares the version it was written against
(``ReconcilerPlugin(api_version=...)``) and a newer one is refused at load.
Names are imported on first use, so ``import datum.sdk`` costs nothing.

Reconcilers
    ``ReconcilerPlugin`` (what an entry point in ``datum.reconcilers`` names),
    ``Reconciler`` (the protocol), ``ReconcilerSettings``, ``PassContext``,
    ``Result``, ``Item`` (a bespoke reconciler's report), ``SubstrateError``,
    ``BreakerSettings`` (a reconciler's own breaker defaults).
Converging
    ``Converge``, ``ConvergeConfig``, ``Direction``, ``ConvergeMode``.
What an apply raises (``datum.core.errors`` draws the hierarchy)
    ``TemporaryError``, ``PermanentError``, ``BlockedOnOwner``, ``Waiting``.
Reasons
    ``Reason`` (the contract's registry), ``PluginReason``, ``registered``.
Coverage
    ``CoverageDecl``, ``CoverageSpec``, ``CoverageRow``; ``count_statuses`` and
    ``drop_status_counts`` (in a migration: per-status counts kept by the
    database, read by a ``CoverageSpec(..., counted=True)``).
Storage
    ``DesiredTable`` (a desired-state table with statuses: its table, migration,
    per-status counts, coverage, work query and CRUD, written once),
    ``set_status`` (compare-and-set on a desired-state row's status; during a
    pass, ``ctx.compare_and_set``), ``Store``, ``Branch`` (a plugin's own Alembic branch: ``store.require``), ``UTCDateTime``.
Removing what may hold data (count first, never through a symlink)
    ``remove_empty``, ``count_objects``, ``Occupied``.
Findings
    ``Problem``, ``Finding``, ``FieldError``, ``invalid``; ``ErrorCode`` (the codes a finding carries).
Resource types
    ``Provider``, ``PathProvider`` (one whose name is a path under ``--root``),
    ``Spec`` (the spec base), ``HostPath`` (a path attribute), ``HostContext``,
    ``Change`` and ``Action`` (what a plan would do).
Words an operator reads
    ``HostState``, ``Health``; ``age`` (``5m 3s``) and ``when`` (``2026-11-29 23:49:10 UTC``).

HTTP routes and CLI commands of a plugin use ``datum.sdk.http`` and
``datum.sdk.cli``, imported only by the server and the command line; a
reconciler over the fleet itself uses ``datum.sdk.fleet``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

API_VERSION = 1

_WHERE: dict[str, str] = {
    "ReconcilerPlugin": "datum.plugins.spec",
    "Reconciler": "datum.reconcile.registry",
    "ReconcilerSettings": "datum.config",
    "BreakerSettings": "datum.config",
    "PassContext": "datum.reconcile.context",
    "Item": "datum.reconcile.context",
    "SubstrateError": "datum.reconcile.context",
    "Result": "datum.reconcile.result",
    "Converge": "datum.core.converge",
    "ConvergeConfig": "datum.core.converge",
    "Direction": "datum.core.vocab",
    "ConvergeMode": "datum.core.vocab",
    "Health": "datum.core.vocab",
    "HostState": "datum.core.vocab",
    "age": "datum.core.humanize",
    "when": "datum.core.humanize",
    "TemporaryError": "datum.core.errors",
    "PermanentError": "datum.core.errors",
    "BlockedOnOwner": "datum.core.errors",
    "Waiting": "datum.core.errors",
    "Reason": "datum.core.vocab",
    "PluginReason": "datum.core.vocab",
    "registered": "datum.core.vocab",
    "CoverageDecl": "datum.core.coverage",
    "CoverageRow": "datum.core.coverage",
    "CoverageSpec": "datum.reconcile.coverage",
    "count_statuses": "datum.store.status_counts",
    "drop_status_counts": "datum.store.status_counts",
    "Store": "datum.store.engine",
    "set_status": "datum.reconcile.desired",
    "DesiredTable": "datum.reconcile.desired",
    "Branch": "datum.store.migrate",
    "UTCDateTime": "datum.store.types",
    "Problem": "datum.core.findings",
    "ErrorCode": "datum.core.findings",
    "Finding": "datum.core.findings",
    "FieldError": "datum.core.findings",
    "invalid": "datum.core.findings",
    "Provider": "datum.providers.base",
    "PathProvider": "datum.providers.base",
    "HostPath": "datum.providers.spec",
    "Action": "datum.core.vocab",
    "HostContext": "datum.providers.base",
    "Change": "datum.providers.base",
    "Spec": "datum.providers.spec",
    "remove_empty": "datum.safefs",
    "count_objects": "datum.safefs",
    "Occupied": "datum.safefs",
}

__all__ = [
    "API_VERSION",
    "Action",
    "BlockedOnOwner",
    "Branch",
    "BreakerSettings",
    "Change",
    "Converge",
    "ConvergeConfig",
    "ConvergeMode",
    "CoverageDecl",
    "CoverageRow",
    "CoverageSpec",
    "Direction",
    "ErrorCode",
    "FieldError",
    "Finding",
    "Health",
    "HostContext",
    "HostPath",
    "HostState",
    "Item",
    "Occupied",
    "PassContext",
    "PathProvider",
    "PermanentError",
    "PluginReason",
    "Problem",
    "Provider",
    "Reason",
    "Reconciler",
    "ReconcilerPlugin",
    "ReconcilerSettings",
    "Result",
    "Spec",
    "Store",
    "SubstrateError",
    "TemporaryError",
    "UTCDateTime",
    "set_status",
    "DesiredTable",
    "Waiting",
    "age",
    "count_objects",
    "count_statuses",
    "drop_status_counts",
    "invalid",
    "registered",
    "remove_empty",
    "when",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'datum.sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from datum.config import BreakerSettings, ReconcilerSettings
    from datum.core.converge import Converge, ConvergeConfig
    from datum.core.coverage import CoverageDecl, CoverageRow
    from datum.core.errors import BlockedOnOwner, PermanentError, TemporaryError, Waiting
    from datum.core.findings import ErrorCode, FieldError, Finding, Problem, invalid
    from datum.core.humanize import age, when
    from datum.core.vocab import (
        Action,
        ConvergeMode,
        Direction,
        Health,
        HostState,
        PluginReason,
        Reason,
        registered,
    )
    from datum.plugins.spec import ReconcilerPlugin
    from datum.providers.base import Change, HostContext, PathProvider, Provider
    from datum.providers.spec import HostPath, Spec
    from datum.reconcile.context import Item, PassContext, SubstrateError
    from datum.reconcile.coverage import CoverageSpec
    from datum.reconcile.desired import DesiredTable, set_status
    from datum.reconcile.registry import Reconciler
    from datum.reconcile.result import Result
    from datum.safefs import Occupied, count_objects, remove_empty
    from datum.store.engine import Store
    from datum.store.migrate import Branch
    from datum.store.status_counts import count_statuses, drop_status_counts
    from datum.store.types import UTCDateTime

"""Reconcilers on the engine: the protocol, registry, pass context, runner, coverage and report."""

from datum.core.converge import BlockedOnOwner, Waiting
from datum.reconcile.context import PassContext, SubstrateError
from datum.reconcile.coverage import CoverageSpec
from datum.reconcile.registry import Reconciler, Registry

__all__ = [
    "BlockedOnOwner",
    "CoverageSpec",
    "PassContext",
    "Reconciler",
    "Registry",
    "SubstrateError",
    "Waiting",
]

"""The reconcilers that ship with Datum, written only against the public framework API."""

from __future__ import annotations

from datum.reconcile.registry import Registry


def builtin_registry() -> Registry:
    """A registry with every shipped reconciler."""
    from datum.reconcilers import buckets

    registry = Registry()
    registry.register(buckets.NAME, buckets.BucketsReconciler, buckets.BucketSettings)
    return registry

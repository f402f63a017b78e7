"""The ``buckets`` example reconciler, as a plugin: its declaration, and (lazily) its code.

One directory per bucket under a root; desired state in the ``buckets`` table
(from this plugin's own Alembic branch). Its reconciler is in ``reconciler``,
its HTTP routes (``/v1/buckets``) in ``routes``, its ``datum bucket`` command
in ``cli``, its Cedar entities and actions in ``buckets.cedarschema``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from datum.sdk import ReconcilerPlugin

_HERE = Path(__file__).parent

plugin = ReconcilerPlugin(
    name="buckets",
    reconciler="datum.reconcilers.buckets.reconciler:BucketsReconciler",
    settings="datum.reconcilers.buckets.reconciler:BucketSettings",
    migrations=_HERE / "migrations",
    cedar_schema=resources.files(__name__).joinpath("buckets.cedarschema").read_text(encoding="utf-8"),
    routes="datum.reconcilers.buckets.routes:router",
    prefix="/v1/buckets",
    commands={"bucket": "datum.reconcilers.buckets.cli:bucket"},
)


def __getattr__(name: str) -> Any:
    """``buckets.create``, ``buckets.BucketsReconciler``, ...: the reconciler module's names, imported on use."""
    import importlib

    module = importlib.import_module(f"{__name__}.reconciler")
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None

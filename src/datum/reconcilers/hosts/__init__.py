"""The ``hosts`` reconciler, as a plugin: the fleet Datum manages, declared against what reports.

Desired: the hosts an operator declared (``nodes.yaml`` rules with ``expected: true``, an
inventory file). Actual: the hosts whose agents report. ``reconciler`` holds the code, its table
of revocations comes from its own Alembic branch (``migrations/``). On with the fleet.
"""

from __future__ import annotations

from pathlib import Path

from datum.sdk import ReconcilerPlugin

plugin = ReconcilerPlugin(
    name="hosts",
    reconciler="datum.reconcilers.hosts.reconciler:HostsReconciler",
    settings="datum.reconcilers.hosts.reconciler:HostsSettings",
    reasons={
        "never_reported": (
            "a declared host no report has ever come from: its agent is not installed or not running, "
            "its token is refused, or it reports under another name than the one declared "
            "(datum hosts lists the names that report)"
        ),
        "silent": (
            "a declared host whose agent reported before and has been silent for more than "
            "[fleet] stale_after of its intervals: the host is down or unreachable, or its agent stopped"
        ),
    },
    migrations=Path(__file__).parent / "migrations",
)

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
            "(datum hosts lists the names that report)",
            "Go and look at the host: install and start datum agent on it, check its token (datum token list) "
            "and the name it reports under (datum hosts); or stop declaring it (nodes.yaml expected, the "
            "inventory). The line clears at its first report.",
        ),
        "silent": (
            "a declared host whose agent reported before and has been silent for more than "
            "[fleet] stale_after of its intervals: the host is down or unreachable, or its agent stopped",
            "Go and look at the host: is it up, can it reach the server, does datum agent run (systemctl status "
            "datum-agent)? The line clears at its next report; stop declaring it if it is gone for good.",
        ),
    },
    # One phrase per situation, naming the hosts, for every surface (Needs a human, datum drift, the page).
    items={
        "never_reported": ("host {names} is declared and has never reported",
                           "{n} declared hosts have never reported: {names}"),
        "silent": ("host {names} is declared and fell silent", "{n} declared hosts fell silent: {names}"),
        "suppressed_no_reap": ("host {names} reports and nodes.yaml does not declare it; left alone (no_reap)",
                               "{n} hosts report that nodes.yaml does not declare; left alone (no_reap): {names}"),
        "reap": ("host {names} reports and nodes.yaml does not declare it",
                 "{n} hosts report that nodes.yaml does not declare: {names}"),
        "restore": ("host {names} is declared and does not report", "{n} declared hosts do not report: {names}"),
    },
    migrations=Path(__file__).parent / "migrations",
)

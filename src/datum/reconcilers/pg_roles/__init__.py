"""The ``pg_roles`` reconciler, as a plugin: PostgreSQL roles of a target server, kept to a table of the store.

The example a plugin author copies: one directory, written only against
``datum.sdk``, with its own table (``migrations/``, its own Alembic branch),
its own reason, and its ``datum pg-role`` command. ``reconciler`` holds the
code, imported when the plugin loads.
"""

from __future__ import annotations

from pathlib import Path

from datum.sdk import ReconcilerPlugin

plugin = ReconcilerPlugin(
    name="pg_roles",
    reconciler="datum.reconcilers.pg_roles.reconciler:PgRolesReconciler",
    settings="datum.reconcilers.pg_roles.reconciler:PgRolesSettings",
    reasons={
        "membership_outside_prefix": (
            "the role is asked to be a member of a role Datum does not own (outside the prefix); "
            "nothing granted until the desired row names one it owns"
        ),
    },
    migrations=Path(__file__).parent / "migrations",
    commands={"pg-role": "datum.reconcilers.pg_roles.cli:pg_role"},
)

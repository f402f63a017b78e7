"""Every host's group (``hosts.group_name``, nodes.yaml's, recorded at intake) and the fleet's hosts by group and
state kept by the database (``hosts_group_status_counts``, ``datum.store.group_counts``): ``/metrics`` carries
``datum_fleet_hosts{group,state}`` without reading every host (issue 26 item 3).

The hosts already there are in ``default`` until their next report.

Revision ID: 0018_host_groups
Revises: 0017_revision_counts
"""

import sqlalchemy as sa
from alembic import op

from datum.store import group_counts

revision = "0018_host_groups"
down_revision = "0017_revision_counts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    if "group_name" not in {c["name"] for c in sa.inspect(bind).get_columns("hosts")}:  # else made by create_all
        op.add_column("hosts", sa.Column("group_name", sa.String(253), nullable=False, server_default="default"))
    group_counts.install(bind)


def downgrade() -> None:
    bind = op.get_bind()
    group_counts.uninstall(bind)
    # Not a batch (SQLite would copy the table, losing the triggers of hosts_status_counts): SQLite 3.35+ drops it.
    bind.execute(sa.text("ALTER TABLE hosts DROP COLUMN group_name"))

"""The fleet's counts kept by the database (``hosts_status_counts``, maintained by triggers on ``hosts``), and
the indexes that find the stale hosts without reading every host (``finished_at``, ``interval_seconds``).

The listing, the page and ``/metrics`` carry every state's count; counting at query time read every
host on every request (issue 26). The stale ones are found through ``finished_at``: a host cannot be
stale before ``stale_after`` of the fleet's shortest interval has passed since its last pass.

Revision ID: 0014_host_counts
Revises: 0013_pass_archive
"""

import sqlalchemy as sa
from alembic import op

from datum.store.status_counts import count_statuses, drop_status_counts

revision = "0014_host_counts"
down_revision = "0013_pass_archive"
branch_labels = None
depends_on = None

INDEXES = {"ix_hosts_finished_at": "finished_at", "ix_hosts_interval_seconds": "interval_seconds"}


def upgrade() -> None:
    bind = op.get_bind()
    count_statuses("hosts", status_column="state", since_column=None, bind=bind)
    there = {i["name"] for i in sa.inspect(bind).get_indexes("hosts")}
    for name, column in INDEXES.items():
        if name not in there:  # else made by create_all
            op.create_index(name, "hosts", [column])


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, "hosts")
    drop_status_counts("hosts", status_column="state", since_column=None, bind=op.get_bind())

"""The fleet's events by resource, by type and by state from an index (issue 26 item 4): ``GET /v1/events``,
``datum events`` and the page's timeline filtered so read one index range, newest first, instead of every
event of the window until a page of matches is found.

On PostgreSQL the indexes are made on ``pass_events``, the parent of its day partitions: every partition,
and each made later, gets its own.

Revision ID: 0019_events_index
Revises: 0018_host_groups
"""

import sqlalchemy as sa
from alembic import op

revision = "0019_events_index"
down_revision = "0018_host_groups"
branch_labels = None
depends_on = None

# As datum.store.schema names them: the filter's column, then the order every events query reads in.
INDEXES = {
    "ix_pass_events_resource": ["resource", "finished_at", "id"],
    "ix_pass_events_type": ["type", "finished_at", "id"],
    "ix_pass_events_state": ["state", "finished_at", "id"],
}


def upgrade() -> None:
    there = {i["name"] for i in sa.inspect(op.get_bind()).get_indexes("pass_events")}
    for name, columns in INDEXES.items():
        if name not in there:  # else made by create_all
            op.create_index(name, "pass_events", columns)


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, "pass_events")

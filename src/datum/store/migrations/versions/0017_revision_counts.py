"""The hosts per revision and state kept by the database (``hosts_revision_status_counts``), as the hosts per state are.

``datum rollout status``, ``GET /v1/revisions`` and the page's Revisions section
counted the hosts per revision with a grouped read of every host's summary: 217 ms
at 100,000 hosts on every page load, and the page's overview grew with the fleet
(issue 26). Each host row now carries its last pass's revision (``revision``, written at
intake), and the database counts the hosts by revision and state with the same triggers
as by state (``datum.store.status_counts``, ``by``).

Revision ID: 0017_revision_counts
Revises: 0016_revisions
"""

import sqlalchemy as sa
from alembic import op

from datum.store.status_counts import count_statuses, drop_status_counts

revision = "0017_revision_counts"
down_revision = "0016_revisions"
branch_labels = None
depends_on = None

COUNTS = "hosts_revision_status_counts"
BY = {"revision": "revision"}


def upgrade() -> None:
    bind = op.get_bind()
    if "revision" not in {c["name"] for c in sa.inspect(bind).get_columns("hosts")}:  # else made by create_all
        op.add_column("hosts", sa.Column("revision", sa.String(100)))
    # the hosts already there, as intake writes it: the revision their summary names
    if bind.dialect.name == "postgresql":
        bind.execute(sa.text("UPDATE hosts SET revision = summary ->> 'revision' WHERE summary ->> 'revision' <> ''"))
    else:
        bind.execute(sa.text(
            "UPDATE hosts SET revision = json_extract(summary, '$.revision') WHERE json_extract(summary, '$.revision') <> ''"
        ))
    count_statuses("hosts", status_column="state", since_column=None, bind=bind, counts=COUNTS, by=BY)


def downgrade() -> None:
    drop_status_counts("hosts", status_column="state", since_column=None, bind=op.get_bind(), counts=COUNTS)
    # Not a batch (SQLite would copy the table, losing the triggers of the other counts): SQLite 3.35+ drops it.
    op.get_bind().execute(sa.text("ALTER TABLE hosts DROP COLUMN revision"))

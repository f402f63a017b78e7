"""The hosts per revision and state kept by the database (``hosts_revision_status_counts``), as the hosts per state are.

``datum rollout status``, ``GET /v1/revisions`` and the page's Revisions section
counted the hosts per revision with a grouped read of every host's summary: 217 ms
at 100,000 hosts on every page load, and the page's overview grew with the fleet
(issue 26). Each host row now carries its last pass's revision and state as one key
(``revision_state``, written at intake), counted by the same triggers as the states
(``datum.store.status_counts``, a count table of its own).

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


def upgrade() -> None:
    bind = op.get_bind()
    columns = {c["name"] for c in sa.inspect(bind).get_columns("hosts")}
    if "revision_state" not in columns:  # else made by create_all from a schema that had it
        op.add_column("hosts", sa.Column("revision_state", sa.String(140), nullable=False, server_default=""))
    if bind.dialect.name == "postgresql":
        revision_of = "COALESCE(summary ->> 'revision', '')"
        sep = "chr(31)"
    else:
        revision_of = "COALESCE(json_extract(summary, '$.revision'), '')"
        sep = "char(31)"
    # the hosts already there, as intake writes the key (datum.core.hostsummary.revision_key)
    bind.execute(sa.text(f"UPDATE hosts SET revision_state = {revision_of} || {sep} || state"))
    count_statuses("hosts", status_column="revision_state", since_column=None, bind=bind, counts=COUNTS)


def downgrade() -> None:
    drop_status_counts("hosts", status_column="revision_state", since_column=None, bind=op.get_bind(), counts=COUNTS)
    op.drop_column("hosts", "revision_state")

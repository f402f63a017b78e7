"""Host summaries: what the host listing reads instead of every report (``hosts.summary``,
``hosts.interval_seconds``, an index on state then name), filled in for the rows already there.

Revision ID: host_summaries
Revises: 0006_tokens
"""

import sqlalchemy as sa
from alembic import op

from datum.core.hostsummary import interval_of, stored, summarize

revision = "host_summaries"
down_revision = "0006_tokens"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    columns = {c["name"] for c in inspector.get_columns("hosts")}
    with op.batch_alter_table("hosts") as batch:
        if "summary" not in columns:
            batch.add_column(sa.Column("summary", sa.JSON(none_as_null=True)))
        if "interval_seconds" not in columns:
            batch.add_column(sa.Column("interval_seconds", sa.Float))
    if "ix_hosts_state_host" not in {i["name"] for i in inspector.get_indexes("hosts")}:
        op.create_index("ix_hosts_state_host", "hosts", ["state", "host"])
    hosts = sa.table(
        "hosts", sa.column("host"), sa.column("report", sa.Text), sa.column("summary", sa.JSON),
        sa.column("interval_seconds", sa.Float),
    )
    rows = bind.execute(
        sa.select(hosts.c.host, sa.type_coerce(hosts.c.report, sa.Text)).where(hosts.c.summary.is_(None))
    ).all()
    for host, raw in rows:
        report = stored(raw)
        bind.execute(
            sa.update(hosts)
            .where(hosts.c.host == host)
            .values(summary=summarize(report), interval_seconds=interval_of(report))
        )


def downgrade() -> None:
    op.drop_index("ix_hosts_state_host", "hosts")
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("interval_seconds")
        batch.drop_column("summary")

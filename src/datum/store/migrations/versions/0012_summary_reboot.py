"""The host summaries carry the last pass's ``reboot`` (``datum.core.hostsummary``): filled in for the rows whose
report has one, so a host awaiting a reboot by hand is one from the first listing after the upgrade, not after
its next pass.

Revision ID: 0012_summary_reboot
Revises: 0011_running_since
"""

import sqlalchemy as sa
from alembic import op

from datum.core.hostsummary import stored, summarize

revision = "0012_summary_reboot"
down_revision = "0011_running_since"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    hosts = sa.table("hosts", sa.column("host"), sa.column("report", sa.Text), sa.column("summary", sa.JSON))
    # Only rows whose report mentions a reboot: the others' summaries are what summarize() writes today.
    rows = bind.execute(
        sa.select(hosts.c.host, sa.type_coerce(hosts.c.report, sa.Text)).where(
            sa.cast(hosts.c.report, sa.Text).like('%"reboot"%')
        )
    ).all()
    for host, raw in rows:
        report = stored(raw)
        if isinstance(report.get("reboot"), dict):
            bind.execute(sa.update(hosts).where(hosts.c.host == host).values(summary=summarize(report)))


def downgrade() -> None:
    pass  # a summary with a reboot reads as one without: nothing to undo

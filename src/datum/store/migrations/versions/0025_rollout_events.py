"""Every transition of a rollout, stored: ``rollout_events`` (``datum.core.vocab.RolloutAct``).

A rollout started before this migration gets what its row still tells: its start, and the act that left it in
the state it is in (when it is not rolling), at its ``updated_at``, by whom the row names (else ``server``).

Revision ID: 0025_rollout_events
Revises: 0024_snapshots_again
"""

import sqlalchemy as sa
from alembic import op

from datum.store.types import UTCDateTime

revision = "0025_rollout_events"
down_revision = "0024_snapshots_again"
branch_labels = None
depends_on = None



def upgrade() -> None:
    bind = op.get_bind()
    if not sa.inspect(bind).has_table("rollout_events"):  # else made by create_all from a schema that had it
        op.create_table(
            "rollout_events",
            sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
            sa.Column("rollout", sa.BigInteger, nullable=False),
            sa.Column("at", UTCDateTime, nullable=False),
            sa.Column("act", sa.String(16), nullable=False),
            sa.Column("state", sa.String(16), nullable=False),
            sa.Column("revision", sa.String(100), nullable=False),
            sa.Column("wave", sa.Integer, nullable=False),
            sa.Column("by", sa.String(200), nullable=False),
            sa.Column("reason", sa.Text),
            sa.Column("hosts", sa.JSON(none_as_null=True)),
        )
        op.create_index("ix_rollout_events_at", "rollout_events", ["at", "id"])
        op.create_index("ix_rollout_events_rollout", "rollout_events", ["rollout", "id"])
    events = sa.table(
        "rollout_events", *(sa.column(c) for c in ("rollout", "at", "act", "state", "revision", "wave", "by", "reason")),
    )
    if bind.execute(sa.select(sa.func.count()).select_from(events)).scalar():
        return
    rows = bind.execute(sa.text(
        "SELECT id, revision, state, wave, started_at, updated_at, by, reason FROM rollouts ORDER BY id"
    )).mappings().all()
    made = []
    for r in rows:
        first = "done" if r["state"] == "done" and r["started_at"] == r["updated_at"] else "rolling"
        made.append(dict(rollout=r["id"], at=r["started_at"], act="started", state=first, revision=r["revision"],
                         wave=0 if first == "rolling" else r["wave"], by="server", reason=None))
        # every state but rolling is entered by the act of its name (a rolling one: its start alone, or a resume)
        act = None if r["state"] == "rolling" else r["state"]
        if act is not None and not (act == "done" and first == "done"):
            made.append(dict(rollout=r["id"], at=r["updated_at"], act=act, state=r["state"], revision=r["revision"],
                             wave=r["wave"], by=r["by"] or "server", reason=r["reason"]))
    if made:
        op.bulk_insert(events, made)


def downgrade() -> None:
    op.drop_index("ix_rollout_events_rollout", "rollout_events")
    op.drop_index("ix_rollout_events_at", "rollout_events")
    op.drop_table("rollout_events")

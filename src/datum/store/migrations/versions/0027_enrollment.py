"""Enrollment: join tokens, host identities, the nonce secret, and sessions among the tokens.

``tokens`` gains ``session`` and ``expires_at`` (a token ``datum token create`` minted
has neither, and keeps working); ``join_tokens``, ``host_identities`` and
``server_secrets`` are new (``datum.fleet.enroll``).

Revision ID: 0027_enrollment
Revises: 0026_token_groups
"""

import sqlalchemy as sa
from alembic import op

from datum.store.types import UTCDateTime

revision = "0027_enrollment"
down_revision = "0026_token_groups"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A store made by create_all before its migrations ran (the tests' pre-migration stores) may have any of
    # these already: each is made only when it is not there.
    inspector = sa.inspect(op.get_bind())
    have = {c["name"] for c in inspector.get_columns("tokens")}
    if "session" not in have:
        op.add_column("tokens", sa.Column("session", sa.Boolean, nullable=False, server_default=sa.false()))
    if "expires_at" not in have:
        op.add_column("tokens", sa.Column("expires_at", UTCDateTime))
    if not inspector.has_table("join_tokens"):
        op.create_table(
            "join_tokens",
            sa.Column("sha256", sa.String(64), primary_key=True),
            sa.Column("host", sa.String(253)),
            sa.Column("pattern", sa.String(253)),
            sa.Column("group_name", sa.String(253)),
            sa.Column("uses", sa.Integer, nullable=False),
            sa.Column("used", sa.Integer, nullable=False, server_default="0"),
            sa.Column("replace", sa.Boolean, nullable=False, server_default=sa.false()),
            sa.Column("created_at", UTCDateTime, nullable=False),
            sa.Column("expires_at", UTCDateTime, nullable=False),
        )
    if not inspector.has_table("host_identities"):
        op.create_table(
            "host_identities",
            sa.Column("host", sa.String(253), primary_key=True),
            sa.Column("public_key", sa.String(64), nullable=False),
            sa.Column("fingerprint", sa.String(80), nullable=False),
            sa.Column("state", sa.String(16), nullable=False),
            sa.Column("reason", sa.Text),
            sa.Column("join_token", sa.String(12)),
            sa.Column("group_name", sa.String(253)),
            sa.Column("source", sa.String(100)),
            sa.Column("facts", sa.Text),
            sa.Column("created_at", UTCDateTime, nullable=False),
            sa.Column("changed_at", UTCDateTime, nullable=False),
        )
        op.create_index("ix_host_identities_state", "host_identities", ["state", "host"])
    if not inspector.has_table("server_secrets"):
        op.create_table(
            "server_secrets",
            sa.Column("name", sa.String(64), primary_key=True),
            sa.Column("value", sa.String(128), nullable=False),
            sa.Column("created_at", UTCDateTime, nullable=False),
        )


def downgrade() -> None:
    op.drop_table("server_secrets")
    op.drop_index("ix_host_identities_state", "host_identities")
    op.drop_table("host_identities")
    op.drop_table("join_tokens")
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("expires_at")
        batch.drop_column("session")

"""The ``pg_roles_desired`` table: the roles asked for on the target PostgreSQL, and their status.

Revision ID: pg_roles_0001
Revises: (root of the pg_roles branch)
"""

import sqlalchemy as sa
from alembic import op

from datum.sdk import UTCDateTime

revision = "pg_roles_0001"
down_revision = None
branch_labels = ("pg_roles",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pg_roles_desired",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("login", sa.Boolean, nullable=False),
        sa.Column("connection_limit", sa.Integer, nullable=False),
        sa.Column("member_of", sa.JSON, nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_pg_roles_desired_status", "pg_roles_desired", ["status"])


def downgrade() -> None:
    op.drop_table("pg_roles_desired")

"""Every rollout snapshot kept before links were kept as links is dropped (``revision_files``).

Before ``0024``, ``datum.fleet.rollouts.snapshot.capture`` stored a link's target content as a plain file, a link
out of the fleet directory included: a file of the server's (a token) linked as a source could be kept
and served to held-back hosts. Which blobs hold such a file cannot be told from the blob, so none is kept.
The revision in force is kept again by the next server that starts on it; a host held back on an older
revision meanwhile is answered 503 and keeps the manifest it has (``datum.fleet.rollouts.serve``).

Revision ID: 0024_snapshots_again
Revises: 0023_rollout_unserved
"""

import sqlalchemy as sa
from alembic import op

revision = "0024_snapshots_again"
down_revision = "0023_rollout_unserved"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(sa.text("DELETE FROM revision_files"))


def downgrade() -> None:
    pass  # what was dropped stays dropped: an older release keeps what it captures anew

"""checkpoint_dir: the directory a job's workers get as GPUPOOL_CHECKPOINT_DIR

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 09:41:07.552190

Plain ``op.add_column``, not ``batch_alter_table``: a batch that copies ``jobs`` on SQLite
deletes every row of ``workers`` and ``events`` (ON DELETE CASCADE; see 0002 and 0003).
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("checkpoint_dir", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "checkpoint_dir")

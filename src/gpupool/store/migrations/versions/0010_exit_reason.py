"""why a worker and its job ended, when the node knows: exit_reason (oom); what each node enforces

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 03:30:00.000000

Plain ``op.add_column`` of nullable columns, never ``batch_alter_table`` (see 0002 and 0003).
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workers", sa.Column("exit_reason", sa.String(length=16), nullable=True))
    op.add_column("jobs", sa.Column("exit_reason", sa.String(length=16), nullable=True))
    op.add_column("nodes", sa.Column("isolation", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("nodes", "isolation")
    op.drop_column("jobs", "exit_reason")
    op.drop_column("workers", "exit_reason")

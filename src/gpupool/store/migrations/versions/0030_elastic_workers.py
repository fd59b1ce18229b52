"""Elastic jobs (issue 35): workers.released, a worker its elastic job runs on without (stopped by
a shrink, or failed while the others ran on), and jobs.rendezvous, the attempt's rendezvous
("address:port" on worker 0's node) that workers added later are told too.

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-27 15:00:00.000000

Plain ``ALTER TABLE ... ADD COLUMN``: every existing worker is not released, every existing job
has no stored rendezvous (a rigid gang never needs it again once started).
"""

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workers", sa.Column("released", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.add_column("jobs", sa.Column("rendezvous", sa.String(300), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "rendezvous")
    op.drop_column("workers", "released")

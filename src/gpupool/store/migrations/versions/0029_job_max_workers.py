"""Elastic jobs (issue 35): jobs.max_workers, the most workers an elastic job may run on (its
``workers`` being its minimum).

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-27 14:00:00.000000

A nullable column added with plain ``ALTER TABLE ... ADD COLUMN``: every existing job keeps null,
a rigid gang as before.
"""

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("max_workers", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "max_workers")

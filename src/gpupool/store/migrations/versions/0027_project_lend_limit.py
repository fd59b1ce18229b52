"""Capacity never lent (issue 34 item 3): projects.lend_limit, the most GPUs of a project's (or
unit's) unused quota that other projects may borrow; the rest stays idle for it.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-02 12:00:00.000000

A nullable column added with plain ``ALTER TABLE ... ADD COLUMN``: every existing project keeps
null, lending all its unused quota as before, so a cluster that sets none decides as before.
"""

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("projects", sa.Column("lend_limit", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("projects", "lend_limit")

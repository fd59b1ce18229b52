"""Quotas and limits per GPU model (issue 34 item 2): projects.quota_by_model, projects.limit_by_model.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-02 12:00:00.000000

Two nullable JSON columns (model -> GPUs) added with plain ``ALTER TABLE ... ADD COLUMN``: every
existing project keeps null, totals only, so a cluster that sets no per-model figure decides as before.
"""

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("projects", sa.Column("quota_by_model", sa.JSON(), nullable=True))
    op.add_column("projects", sa.Column("limit_by_model", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("projects", "limit_by_model")
    op.drop_column("projects", "quota_by_model")

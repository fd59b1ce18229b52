"""projects

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 22:24:14.585501

Plain ``op.add_column`` and ``op.drop_column``, not ``batch_alter_table``: on SQLite a batch that
adds a column with an expression as server default (``sa.false()``), or drops one, copies the
table, and dropping the old ``jobs`` table with foreign keys on deletes every row of ``workers``
and ``events`` (ON DELETE CASCADE). SQLite adds (and, from 3.35, drops) these columns in place;
the schema is the same as the batch built, on every engine.
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("preempt_requested", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.add_column("jobs", sa.Column("gpu_memory_mib", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("workers", sa.Column("gpu_memory_mib", sa.Integer(), nullable=False, server_default="0"))
    op.create_table(
        "project_usage",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("recent_gpus", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "projects",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("quota", sa.Float(), nullable=False),
        sa.Column("limit", sa.Float(), nullable=True),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_column("workers", "gpu_memory_mib")
    op.drop_column("jobs", "gpu_memory_mib")
    op.drop_column("jobs", "preempt_requested")
    op.drop_table("projects")
    op.drop_table("project_usage")

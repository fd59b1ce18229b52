"""projects

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 22:24:14.585501
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("preempt_requested", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch_op.add_column(sa.Column("gpu_memory_mib", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("workers") as batch_op:
        batch_op.add_column(sa.Column("gpu_memory_mib", sa.Integer(), nullable=False, server_default="0"))
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
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("preempt_requested")
        batch_op.drop_column("gpu_memory_mib")
    with op.batch_alter_table("workers") as batch_op:
        batch_op.drop_column("gpu_memory_mib")
    op.drop_table("projects")
    op.drop_table("project_usage")

"""idle GPUs and alerts: idle spells of held GPUs, alerts, a project's idle timeout, a job's not-before

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 10:00:00.000000

New tables and a plain ``op.add_column``, never ``batch_alter_table`` (see 0002 and 0003).
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("projects", sa.Column("idle_timeout_s", sa.Float(), nullable=True))
    op.add_column("jobs", sa.Column("not_before", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "idle_spells",
        sa.Column("node", sa.String(length=128), nullable=False),
        sa.Column("gpu", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("utilization_pct", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("node", "gpu"),
    )
    op.create_index(op.f("ix_idle_spells_job_id"), "idle_spells", ["job_id"], unique=False)
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("node", sa.String(length=128), nullable=False),
        sa.Column("gpu", sa.Integer(), nullable=True),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("raised_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cleared_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_alerts_kind"), "alerts", ["kind"], unique=False)
    op.create_index(op.f("ix_alerts_cleared_at"), "alerts", ["cleared_at"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_alerts_cleared_at"), table_name="alerts")
    op.drop_index(op.f("ix_alerts_kind"), table_name="alerts")
    op.drop_table("alerts")
    op.drop_index(op.f("ix_idle_spells_job_id"), table_name="idle_spells")
    op.drop_table("idle_spells")
    op.drop_column("jobs", "not_before")
    op.drop_column("projects", "idle_timeout_s")

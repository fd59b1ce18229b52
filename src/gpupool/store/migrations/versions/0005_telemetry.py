"""telemetry: raw GPU samples (recent window) and per-minute aggregates (days)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 02:40:00.000000

New tables only (``op.create_table``): nothing existing is altered or copied.
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_samples",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("node", sa.String(length=128), nullable=False),
        sa.Column("gpu", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=128), nullable=False),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("memory_used_mib", sa.Integer(), nullable=False),
        sa.Column("memory_total_mib", sa.Integer(), nullable=False),
        sa.Column("simulated", sa.Boolean(), nullable=False),
        sa.Column("utilization_pct", sa.Float(), nullable=True),
        sa.Column("temperature_c", sa.Float(), nullable=True),
        sa.Column("power_w", sa.Float(), nullable=True),
        sa.Column("energy_j", sa.Float(), nullable=True),
        sa.Column("ecc_errors", sa.Integer(), nullable=True),
        sa.Column("xid_errors", sa.Integer(), nullable=True),
        sa.Column("last_xid", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_gpu_samples_node_gpu_time", "gpu_samples", ["node", "gpu", "time"], unique=False)
    op.create_index(op.f("ix_gpu_samples_time"), "gpu_samples", ["time"], unique=False)
    op.create_table(
        "gpu_minutes",
        sa.Column("node", sa.String(length=128), nullable=False),
        sa.Column("gpu", sa.Integer(), nullable=False),
        sa.Column("minute", sa.DateTime(timezone=True), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("memory_used_mib", sa.Float(), nullable=False),
        sa.Column("memory_total_mib", sa.Integer(), nullable=False),
        sa.Column("utilization_pct", sa.Float(), nullable=True),
        sa.Column("utilization_max_pct", sa.Float(), nullable=True),
        sa.Column("temperature_c", sa.Float(), nullable=True),
        sa.Column("power_w", sa.Float(), nullable=True),
        sa.Column("energy_j", sa.Float(), nullable=True),
        sa.Column("utilization_samples", sa.Integer(), nullable=False),
        sa.Column("power_samples", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("node", "gpu", "minute"),
    )
    op.create_index(op.f("ix_gpu_minutes_minute"), "gpu_minutes", ["minute"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_gpu_minutes_minute"), table_name="gpu_minutes")
    op.drop_table("gpu_minutes")
    op.drop_index(op.f("ix_gpu_samples_time"), table_name="gpu_samples")
    op.drop_index("ix_gpu_samples_node_gpu_time", table_name="gpu_samples")
    op.drop_table("gpu_samples")

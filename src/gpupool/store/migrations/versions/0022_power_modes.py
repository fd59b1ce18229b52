"""Per-job power modes (issue 33): projects.gpu_power, a project's default mode for its jobs
("max", "efficient", "400W"; null: max), and power_curves, one calibrated curve per GPU model
(``gpupool node calibrate-power``).

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-27 12:00:00.000000

The lead rechains the issue's migrations (0021-0024) at merge; each revises 0020 until then.
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("projects", sa.Column("gpu_power", sa.String(length=16), nullable=True))
    op.create_table(
        "power_curves",
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("node", sa.String(length=128), nullable=False),
        sa.Column("points", sa.JSON(), nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("model"),
    )


def downgrade() -> None:
    op.drop_table("power_curves")
    op.drop_column("projects", "gpu_power")

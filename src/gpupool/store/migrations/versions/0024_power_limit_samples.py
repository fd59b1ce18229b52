"""GPU power limits in telemetry (issue 33): gpu_samples.power_limit_w, the limit the GPU enforced
when it was read, and gpu_minutes.power_limit_w, the lowest limit in force during the minute.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-27 12:00:00.000000

Nullable columns added with plain ``ALTER TABLE ... ADD COLUMN``: older samples did not read the
limit, and null says so (never a made-up default).
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("gpu_samples", sa.Column("power_limit_w", sa.Float(), nullable=True))
    op.add_column("gpu_minutes", sa.Column("power_limit_w", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("gpu_minutes", "power_limit_w")
    op.drop_column("gpu_samples", "power_limit_w")

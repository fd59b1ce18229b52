"""Power budget (issue 33): nodes.power_budget_w, a node's own budget (a rack's circuit; null:
none), and workers.gpu_power, the GPU power setting a worker launched with (``PowerSetting`` as
JSON; null: the GPU's default), which the budget counts its GPUs at.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-27 12:30:00.000000

Two nullable columns added with plain ``ALTER TABLE ... ADD COLUMN``: existing nodes have no
budget and existing workers ran at their GPUs' default, which is what null means.
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("power_budget_w", sa.Float(), nullable=True))
    op.add_column("workers", sa.Column("gpu_power", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("workers", "gpu_power")
    op.drop_column("nodes", "power_budget_w")

"""GPU power range (issue 33): gpus.power_min_w, power_max_w, power_default_w, what a GPU's power
limit may be set to and its default, in watts, as its node's probe reports them.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27 12:00:00.000000

Nullable columns added with plain ``ALTER TABLE ... ADD COLUMN``: a GPU registered before says
nothing of its range until its node registers again, which it does as the head starts.
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for column in ("power_min_w", "power_max_w", "power_default_w"):
        op.add_column("gpus", sa.Column(column, sa.Integer(), nullable=True))


def downgrade() -> None:
    for column in ("power_default_w", "power_max_w", "power_min_w"):
        op.drop_column("gpus", column)

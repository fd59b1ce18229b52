"""GPU power modes (issue 33): jobs.gpu_power, the mode a job asked for ("max", "efficient",
"400W"); null: its project's default, else max.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27 11:00:00.000000

A nullable column added with plain ``ALTER TABLE ... ADD COLUMN``: existing jobs ran at their
GPUs' default, which is what null means.
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("gpu_power", sa.String(length=16), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "gpu_power")

"""job arrays: jobs.array_id (the array's first task), array_index, array_max_running

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24 07:40:00.000000

Null for every job that is not a task of an array. Plain ``op.add_column`` of nullable columns,
never ``batch_alter_table``, whose copy of ``jobs`` would cascade-delete its workers and events
(see 0002, 0003 and 0010); an index on array_id: an array's tasks are read together.
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("array_id", sa.Integer(), nullable=True))
    op.add_column("jobs", sa.Column("array_index", sa.Integer(), nullable=True))
    op.add_column("jobs", sa.Column("array_max_running", sa.Integer(), nullable=True))
    op.create_index(op.f("ix_jobs_array_id"), "jobs", ["array_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_jobs_array_id"), table_name="jobs")
    for column in ("array_max_running", "array_index", "array_id"):
        op.drop_column("jobs", column)

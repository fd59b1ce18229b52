"""Arrays accepted as one record (issue 36): jobs.array_unmade, on an array's first task, the
indices of its tasks not written yet ("1-999"), null once they are (and on every other job); an
index on (owner, state, array_id), from which a user's arrays in flight are counted.

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-27 19:30:00.000000

Plain ``ALTER TABLE ... ADD COLUMN``: every existing array has all its tasks written already. An
index on it: the controller and the readers that list tasks look for arrays with tasks still to
make, which is almost always none.
"""

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("array_unmade", sa.Text(), nullable=True))
    op.create_index(op.f("ix_jobs_array_unmade"), "jobs", ["array_unmade"], unique=False)
    op.create_index("ix_jobs_owner_state_array", "jobs", ["owner", "state", "array_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_jobs_owner_state_array", table_name="jobs")
    op.drop_index(op.f("ix_jobs_array_unmade"), table_name="jobs")
    op.drop_column("jobs", "array_unmade")

"""jobs.expose: a port of worker 0 the gateway publishes at /jobs/<id>/ (``gpupool submit --expose``)

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 09:00:00.000000

A plain ``op.add_column`` of a nullable column, never ``batch_alter_table``, whose copy of ``jobs``
would cascade-delete its workers and events (see 0002, 0003 and 0010). No index: the gateway's
route table reads running jobs, a set the state index already narrows.
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("expose", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "expose")

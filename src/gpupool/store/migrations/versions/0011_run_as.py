"""the Unix account each job runs as, fixed at submit: jobs.run_as; each worker's cgroup readings

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 05:00:00.000000

Null for jobs submitted before, and in single-user mode: they run as the node's own user, as
they always did. Plain ``op.add_column`` of a nullable column (see 0002 and 0003).
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


USAGE = (
    ("memory_used_mib", sa.Integer()),
    ("memory_peak_mib", sa.Integer()),
    ("cpu_seconds", sa.Float()),
    ("cpu_pct", sa.Float()),
    ("usage_at", sa.DateTime(timezone=True)),
)


def upgrade() -> None:
    op.add_column("jobs", sa.Column("run_as", sa.String(length=32), nullable=True))
    for name, kind in USAGE:
        op.add_column("workers", sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    for name, _ in reversed(USAGE):
        op.drop_column("workers", name)
    op.drop_column("jobs", "run_as")

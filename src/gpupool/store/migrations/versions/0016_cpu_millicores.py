"""CPUs in millicores: jobs.cpus (whole cores) becomes jobs.cpu_milli; workers.cpu_milli

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-24 14:30:00.000000

A request of 0.5 cores is 500 millicores, counted exactly as Kubernetes counts them. Existing jobs
keep what they asked for (cores x 1000). ``workers.cpu_milli`` is a fractional worker's part of its
node's unpinned cores (0: its ``cpus`` are pinned, as every worker's were before).

``jobs.cpus`` is dropped with a plain ``ALTER TABLE ... DROP COLUMN`` (SQLite 3.35+ and PostgreSQL
both have it), never ``batch_alter_table``, whose copy of ``jobs`` would cascade-delete its workers
and events (see 0002, 0003 and 0010).
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("cpu_milli", sa.Integer(), nullable=False, server_default="0"))
    op.execute("UPDATE jobs SET cpu_milli = cpus * 1000")
    op.drop_column("jobs", "cpus")
    op.add_column("workers", sa.Column("cpu_milli", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("workers", "cpu_milli")
    op.add_column("jobs", sa.Column("cpus", sa.Integer(), nullable=False, server_default="0"))
    op.execute("UPDATE jobs SET cpus = (cpu_milli + 999) / 1000")
    op.drop_column("jobs", "cpu_milli")

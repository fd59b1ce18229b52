"""inference services: the services table; jobs.service, jobs.port_env; workers.port, workers.ready_at

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25 09:00:00.000000

A replica is a job whose ``service`` names its service. Plain ``op.add_column`` of nullable
columns, never ``batch_alter_table``, whose copy of ``jobs`` would cascade-delete its workers and
events (see 0002, 0003 and 0010); an index on jobs.service: a service's replicas are read together.
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "services",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("run_as", sa.String(length=32), nullable=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("desired", sa.Integer(), nullable=False),
        sa.Column("autoscale", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_index(op.f("ix_services_project"), "services", ["project"], unique=False)
    op.add_column("jobs", sa.Column("service", sa.String(length=63), nullable=True))
    op.add_column("jobs", sa.Column("port_env", sa.String(length=64), nullable=True))
    op.create_index(op.f("ix_jobs_service"), "jobs", ["service"], unique=False)
    op.add_column("workers", sa.Column("port", sa.Integer(), nullable=True))
    op.add_column("workers", sa.Column("ready_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    for column in ("ready_at", "port"):
        op.drop_column("workers", column)
    op.drop_index(op.f("ix_jobs_service"), table_name="jobs")
    for column in ("port_env", "service"):
        op.drop_column("jobs", column)
    op.drop_index(op.f("ix_services_project"), table_name="services")
    op.drop_table("services")

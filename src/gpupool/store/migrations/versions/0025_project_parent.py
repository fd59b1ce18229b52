"""The tree of projects (issue 34): projects.parent, the organisational unit above a project.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-01 12:00:00.000000

A nullable column added with plain ``ALTER TABLE ... ADD COLUMN``: every existing project keeps
null, a child of the root with its settings, so a cluster that sets no parent decides as before.
Indexed: a submission asks whether its project has children (jobs go to leaves only).
"""

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("projects", sa.Column("parent", sa.String(64), nullable=True))
    op.create_index(op.f("ix_projects_parent"), "projects", ["parent"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_projects_parent"), table_name="projects")
    op.drop_column("projects", "parent")

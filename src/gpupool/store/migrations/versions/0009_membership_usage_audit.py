"""project membership, who may submit where, each user's recent use within a project, and the audit log

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 02:00:00.000000

Before this revision any token could submit to any project, and a job naming a new project made
it. So that nobody loses what they could do: every user who owns a job in a project becomes a
member of it, and ``default`` (the project of jobs that name none) stays open to everyone. New
projects are closed: an admin adds their members.

New tables and a plain ``op.add_column``, never ``batch_alter_table`` (see 0002 and 0003).
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

jobs = sa.table("jobs", sa.column("project", sa.String), sa.column("owner", sa.String))
users = sa.table("users", sa.column("name", sa.String), sa.column("role", sa.String))
projects = sa.table("projects", sa.column("name", sa.String), sa.column("everyone", sa.Boolean))
members = sa.table(
    "project_members",
    sa.column("project", sa.String),
    sa.column("user", sa.String),
    sa.column("role", sa.String),
    sa.column("created_at", sa.DateTime(True)),
)


def upgrade() -> None:
    op.add_column("projects", sa.Column("everyone", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "project_members",
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("project", "user"),
    )
    op.create_index(op.f("ix_project_members_user"), "project_members", ["user"], unique=False)
    op.create_table(
        "user_usage",
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("recent_gpus", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("project", "user"),
    )
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("user", sa.String(length=64), nullable=True),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=256), nullable=False),
        sa.Column("result", sa.String(length=16), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("client", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_audit_at"), "audit", ["at"], unique=False)
    op.create_index(op.f("ix_audit_user"), "audit", ["user"], unique=False)

    bind = op.get_bind()
    bind.execute(sa.update(projects).where(projects.c.name == "default").values(everyone=True))
    admins = {name for (name,) in bind.execute(sa.select(users.c.name).where(users.c.role == "admin"))}
    known = {name for (name,) in bind.execute(sa.select(users.c.name))}
    owned = bind.execute(sa.select(jobs.c.project, jobs.c.owner).distinct())
    now = datetime.now(UTC)
    rows = [
        {"project": project, "user": owner, "role": "member"}
        for project, owner in owned
        if project != "default" and owner in known and owner not in admins
    ]
    if rows:
        op.bulk_insert(members, [{**row, "created_at": now} for row in rows])


def downgrade() -> None:
    op.drop_index(op.f("ix_audit_user"), table_name="audit")
    op.drop_index(op.f("ix_audit_at"), table_name="audit")
    op.drop_table("audit")
    op.drop_table("user_usage")
    op.drop_index(op.f("ix_project_members_user"), table_name="project_members")
    op.drop_table("project_members")
    op.drop_column("projects", "everyone")

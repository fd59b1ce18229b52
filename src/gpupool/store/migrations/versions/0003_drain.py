"""drain: the admin's wish to drain a node, and a GPU an admin took out of service

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 10:12:40.118034

Plain ``op.add_column``, not ``batch_alter_table``: on SQLite a batch with an expression as
server default copies the table, and dropping the old ``nodes`` table with foreign keys on
deletes every row of ``gpus`` (ON DELETE CASCADE). SQLite adds (and, from 3.35, drops) such a
column in place.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("drain_requested", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.add_column("gpus", sa.Column("disabled", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    op.drop_column("gpus", "disabled")
    op.drop_column("nodes", "drain_requested")

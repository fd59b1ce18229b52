"""exit_reason fits image_unavailable: workers.exit_reason and jobs.exit_reason widen to 32

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28 09:00:00.000000

``image_unavailable`` (issue 32: a node could not get the job's image now) is 17 characters, one
more than the 16 of 0010: PostgreSQL refused to record such an exit, so the reap step failed on it
every cycle (SQLite does not enforce a VARCHAR's length). PostgreSQL widens the columns in place.
SQLite cannot change a column's type, and ``batch_alter_table`` is never used (its copy of ``jobs``
would cascade-delete its workers and events; see 0002, 0003 and 0010): each column is copied to a
new one, dropped, and the new one renamed (SQLite 3.35+), all in place.
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def _resize(length: int) -> None:
    for table in ("workers", "jobs"):
        if op.get_bind().dialect.name != "sqlite":
            op.alter_column(table, "exit_reason", type_=sa.String(length), existing_nullable=True)
            continue
        op.add_column(table, sa.Column("exit_reason_new", sa.String(length), nullable=True))
        op.execute(f"UPDATE {table} SET exit_reason_new = substr(exit_reason, 1, {length})")
        op.drop_column(table, "exit_reason")
        op.alter_column(table, "exit_reason_new", new_column_name="exit_reason")


def upgrade() -> None:
    _resize(32)


def downgrade() -> None:
    _resize(16)  # a reason past 16 characters is cut (SQLite); PostgreSQL refuses a row that has one

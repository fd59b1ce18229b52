"""Users' own registry logins (issue 32): registry_logins, one row per user and registry, the
secret sealed with the head's key (``store/sealing.py``).

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27 10:40:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "registry_logins",
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("username", sa.String(length=256), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("saved_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("user", "host"),
    )


def downgrade() -> None:
    op.drop_table("registry_logins")

"""Per-user limits inside a project (issue 34 item 4): projects.user_limit, the GPUs one user's
jobs may hold there at once, and projects.user_limits, a JSON object of per-user figures
({"ann": 8, "pi": null}; null: no limit for that user).

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-04 12:00:00.000000

Nullable columns: a project from before has no user limits, and null says so. The lead rechains
the issue's migrations (0025-0027) at merge; each revises 0024 until then.
"""

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("projects", sa.Column("user_limit", sa.Float(), nullable=True))
    op.add_column("projects", sa.Column("user_limits", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("projects", "user_limits")
    op.drop_column("projects", "user_limit")

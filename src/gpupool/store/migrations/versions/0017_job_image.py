"""Jobs in OCI images (issue 32): jobs.image (the reference asked for) and jobs.image_digest (the
manifest digest the last attempt ran).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27 08:00:00.000000

Two nullable columns added with plain ``ALTER TABLE ... ADD COLUMN``: existing jobs ran in their
node's own userland, which is what no image means.
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("image", sa.String(512), nullable=True))
    op.add_column("jobs", sa.Column("image_digest", sa.String(80), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "image_digest")
    op.drop_column("jobs", "image")

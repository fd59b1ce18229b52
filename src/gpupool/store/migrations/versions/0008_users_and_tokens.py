"""users, and tokens with a name, a scope, an expiry, a last use and a revocation

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 00:30:00.000000

Every user named by an existing token (but the join token, which belongs to nobody) becomes a
user: ``admin`` for an admin token, else ``member``; so the head's bootstrap token now belongs to
the built-in user ``admin``, and every existing token keeps working. Existing tokens get no scope
(null: the widest their user's role allows), no expiry, no last use.

Plain ``op.add_column`` and ``op.create_table``, never ``batch_alter_table`` (see 0002): SQLite
adds these nullable columns in place, without rebuilding ``tokens``.
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

NEW_COLUMNS = ("name", "scope", "expires_at", "last_used_at", "revoked_at")

tokens = sa.table(
    "tokens", sa.column("user", sa.String), sa.column("role", sa.String), sa.column("created_at", sa.DateTime(True))
)
users = sa.table(
    "users",
    sa.column("name", sa.String),
    sa.column("role", sa.String),
    sa.column("unix_user", sa.String),
    sa.column("disabled", sa.Boolean),
    sa.column("created_at", sa.DateTime(True)),
)


def upgrade() -> None:
    op.add_column("tokens", sa.Column("name", sa.String(length=64), nullable=True))
    op.add_column("tokens", sa.Column("scope", sa.String(length=16), nullable=True))
    op.add_column("tokens", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("tokens", sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("tokens", sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "users",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("unix_user", sa.String(length=32), nullable=True),
        sa.Column("disabled", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    found: dict[str, tuple[str, object]] = {}
    owners = op.get_bind().execute(
        sa.select(tokens.c.user, tokens.c.role, tokens.c.created_at)
        .where(tokens.c.role != "join")
        .order_by(tokens.c.created_at)
    )
    for user, role, created_at in owners:
        first = found.get(user)
        role = "admin" if role == "admin" or (first is not None and first[0] == "admin") else "member"
        found[user] = (role, first[1] if first is not None else created_at)
    if found:
        op.bulk_insert(
            users,
            [
                {"name": name, "role": role, "unix_user": None, "disabled": False, "created_at": created_at}
                for name, (role, created_at) in found.items()
            ],
        )


def downgrade() -> None:
    op.drop_table("users")
    for column in NEW_COLUMNS:
        op.drop_column("tokens", column)

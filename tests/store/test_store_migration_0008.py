"""Migration 0008 makes a user of every token's owner (but the join token's) on SQLite and
PostgreSQL, from a database at 0007: the bootstrap admin token then belongs to the user ``admin``,
and every existing token, the join token included, keeps working."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import text

from gpupool.domain.users import Role, Scope
from gpupool.store import tokens, users
from gpupool.store.db import Database
from gpupool.store.orm import Base
from tests.support.store import schema_diff, upgrade_to

# (user, role) of the tokens a head at 0007 may hold: the bootstrap admin and join tokens, and
# tokens made by hand for other users.
TOKENS = [("admin", "admin"), ("join", "join"), ("alice", "user"), ("alice", "user"), ("ops", "admin")]


def test_0008_makes_users_of_token_owners_and_keeps_every_token(db_url: str, now: datetime) -> None:
    database = Database(db_url)
    plain = [tokens.new_token() for _ in TOKENS]
    try:
        with database.engine.begin() as connection:
            upgrade_to(database, connection, "0007")
            for i, ((user, role), token) in enumerate(zip(TOKENS, plain, strict=True)):
                connection.execute(
                    text('INSERT INTO tokens ("user", role, token_hash, created_at) VALUES (:u, :r, :h, :at)'),
                    {"u": user, "r": role, "h": tokens.hash_token(token), "at": now + timedelta(seconds=i)},
                )
        database.migrate()
        assert schema_diff(database, Base.metadata) == []
        with database.tx() as s:
            listed = {u.name: u for u in users.list_users(s)}
            who = [tokens.principal_for(s, token, now + timedelta(hours=1)) for token in plain]
        assert {name: u.role for name, u in listed.items()} == {
            "admin": Role.ADMIN,
            "alice": Role.MEMBER,
            "ops": Role.ADMIN,
        }
        assert listed["admin"].created_at == now and listed["alice"].created_at == now + timedelta(seconds=2)
        assert not any(u.disabled or u.unix_user for u in listed.values())
        assert [(p.user, p.role) if p else None for p in who] == [
            ("admin", "admin"),
            ("join", "join"),
            ("alice", "member"),
            ("alice", "member"),
            ("ops", "admin"),
        ]
        admin = who[0]
        assert admin is not None and admin.is_admin and admin.may(Scope.ADMIN)
        with database.tx() as s:
            assert tokens.has_role(s, "join") and tokens.has_admin(s)
            assert all(t.scope is None and t.expires_at is None for t in tokens.list_tokens(s, None))
    finally:
        database.close()

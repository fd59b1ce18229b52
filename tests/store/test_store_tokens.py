"""API tokens: only hashes are stored; a token maps back to its principal."""

from __future__ import annotations

import hashlib
from datetime import datetime

from sqlalchemy import select

from gpupool.store import tokens
from gpupool.store.db import Database
from gpupool.store.orm import TokenRow


def test_token_is_stored_as_its_hash_only(db: Database, now: datetime) -> None:
    with db.tx() as session:
        plain = tokens.create_token(session, "alice", "admin", now)
    assert plain.startswith("gp_") and len(plain) > 40
    with db.tx() as session:
        rows = list(session.scalars(select(TokenRow)))
    assert len(rows) == 1
    row = rows[0]
    assert row.token_hash == hashlib.sha256(plain.encode()).hexdigest()
    stored = (row.user, row.role, row.token_hash)
    assert all(plain not in str(value) for value in stored)
    assert (row.user, row.role, row.created_at) == ("alice", "admin", now)


def test_principal_for_finds_the_owner_and_rejects_other_tokens(db: Database, now: datetime) -> None:
    with db.tx() as session:
        assert not tokens.has_admin(session)
        alice = tokens.create_token(session, "alice", "admin", now)
        bob = tokens.create_token(session, "bob", "user", now)
    assert alice != bob
    with db.tx() as session:
        assert tokens.has_admin(session)
        assert tokens.principal_for(session, alice, now) == tokens.Principal("alice", "admin")
        assert tokens.principal_for(session, bob, now) == tokens.Principal("bob", "user")
        assert tokens.principal_for(session, bob, now).is_admin is False  # type: ignore[union-attr]
        assert tokens.principal_for(session, "gp_" + "x" * 43, now) is None
        assert tokens.principal_for(session, alice[:-1], now) is None
        assert tokens.principal_for(session, "", now) is None
        # The stored hash itself is not a token.
        assert tokens.principal_for(session, tokens.hash_token(alice), now) is None


def test_user_tokens_do_not_make_an_admin(db: Database, now: datetime) -> None:
    with db.tx() as session:
        tokens.create_token(session, "bob", "user", now)
    with db.tx() as session:
        assert not tokens.has_admin(session)

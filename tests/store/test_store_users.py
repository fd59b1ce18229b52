"""Users and their tokens in the store, on both engines: names are unique, the last admin stays,
and a token works only while it is not revoked, not expired and its user is enabled."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import select

from gpupool.domain.errors import Conflict, InvalidInput, NotFound
from gpupool.domain.jobs import JobSpec
from gpupool.domain.users import Role, Scope, check_user_name, expiry
from gpupool.store import jobs, tokens, users
from gpupool.store.db import Database
from gpupool.store.orm import TokenRow


def test_users_are_added_listed_and_unique(db: Database, now: datetime) -> None:
    with db.tx() as s:
        users.add_user(s, "root", Role.ADMIN, None, now)
        users.add_user(s, "alice", Role.MEMBER, "alice", now)
        users.add_user(s, "val", Role.VIEWER, None, now)
    with db.tx() as s:
        listed = users.list_users(s)
    assert [(u.name, u.role, u.unix_user, u.disabled) for u in listed] == [
        ("alice", Role.MEMBER, "alice", False),
        ("root", Role.ADMIN, None, False),
        ("val", Role.VIEWER, None, False),
    ]
    assert listed[0].created_at == now
    with pytest.raises(Conflict) as dup, db.tx() as s:
        users.add_user(s, "alice", Role.VIEWER, None, now)
    assert dup.value.code == "user_exists"
    for missing in (
        lambda s: users.get_user(s, "bob"),
        lambda s: users.set_disabled(s, "bob", True, now),
        lambda s: users.delete_user(s, "bob", now),
    ):
        with pytest.raises(NotFound), db.tx() as s:
            missing(s)


@pytest.mark.parametrize("name", ["", "-x", "a b", "x" * 64, "join", "é"])
def test_bad_user_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidInput):
        check_user_name(name)


def test_the_last_admin_cannot_be_disabled_demoted_or_deleted(db: Database, now: datetime) -> None:
    with db.tx() as s:
        users.add_user(s, "root", Role.ADMIN, None, now)
        users.add_user(s, "alice", Role.MEMBER, None, now)
    for change in (
        lambda s: users.set_disabled(s, "root", True, now),
        lambda s: users.set_role(s, "root", Role.MEMBER, now),
        lambda s: users.delete_user(s, "root", now),
    ):
        with pytest.raises(Conflict) as refused, db.tx() as s:
            change(s)
        assert refused.value.code == "last_admin"
    with db.tx() as s:
        users.set_role(s, "alice", Role.ADMIN, now)
    with db.tx() as s:  # with a second admin, the first may go
        users.set_disabled(s, "root", True, now)
    with pytest.raises(Conflict), db.tx() as s:  # a disabled admin does not count
        users.delete_user(s, "alice", now)
    with db.tx() as s:
        users.delete_user(s, "root", now)
        assert [u.name for u in users.list_users(s)] == ["alice"]


def test_a_user_with_active_jobs_cannot_be_deleted_and_deleting_drops_their_tokens(db: Database, now: datetime) -> None:
    with db.tx() as s:
        users.add_user(s, "alice", Role.MEMBER, None, now)
        plain = tokens.create_token(s, "alice", "member", now)
        job = jobs.insert_job(s, JobSpec.create(command=["true"]), "alice", now)
    with pytest.raises(Conflict) as refused, db.tx() as s:
        users.delete_user(s, "alice", now)
    assert refused.value.code == "user_in_use"
    with db.tx() as s:
        jobs.request_cancel(s, job.id, now, by="alice")
    with db.tx() as s:
        users.delete_user(s, "alice", now)
    with db.tx() as s:
        assert tokens.principal_for(s, plain, now) is None
        assert list(s.scalars(select(TokenRow).where(TokenRow.user == "alice"))) == []


def test_tokens_carry_name_scope_expiry_and_never_the_token(db: Database, now: datetime) -> None:
    with db.tx() as s:
        users.add_user(s, "alice", Role.MEMBER, None, now)
        plain = tokens.create_token(
            s, "alice", "member", now, name="ci", scope=Scope.READ, expires_at=now + timedelta(days=90)
        )
        tokens.create_token(s, "alice", "member", now)
        tokens.create_token(s, "root", "admin", now)
    with db.tx() as s:
        mine = tokens.list_tokens(s, "alice")
        everyone = tokens.list_tokens(s, None)
    assert [(t.name, t.user, t.scope, t.expires_at, t.last_used_at) for t in mine] == [
        ("ci", "alice", "read", now + timedelta(days=90), None),
        (None, "alice", None, None, None),
    ]
    assert [t.user for t in everyone] == ["alice", "alice", "root"]
    assert all(plain not in repr(t) and tokens.hash_token(plain) not in repr(t) for t in everyone)
    with db.tx() as s:
        who = tokens.principal_for(s, plain, now)
    assert who is not None and (who.user, who.role, who.token_id) == ("alice", "member", mine[0].id)
    assert who.may(Scope.READ) and not who.may(Scope.SUBMIT)


def test_revoked_and_expired_tokens_and_disabled_users_are_refused(db: Database, now: datetime) -> None:
    with db.tx() as s:
        users.add_user(s, "root", Role.ADMIN, None, now)
        users.add_user(s, "alice", Role.MEMBER, None, now)
        revoked = tokens.create_token(s, "alice", "member", now)
        expiring = tokens.create_token(s, "alice", "member", now, expires_at=now + timedelta(minutes=5))
        kept = tokens.create_token(s, "alice", "member", now)
    with db.tx() as s:
        revoked_id = tokens.list_tokens(s, "alice")[0].id
        tokens.revoke_token(s, revoked_id, now)
    with pytest.raises(NotFound), db.tx() as s:  # once
        tokens.revoke_token(s, revoked_id, now)
    with db.tx() as s:
        assert tokens.principal_for(s, revoked, now) is None
        assert tokens.principal_for(s, expiring, now + timedelta(minutes=4)) is not None
        assert tokens.principal_for(s, expiring, now + timedelta(minutes=5)) is None
        assert tokens.principal_for(s, kept, now) is not None
        assert [t.id for t in tokens.list_tokens(s, "alice")] == [revoked_id + 1, revoked_id + 2]
    with db.tx() as s:
        users.set_disabled(s, "alice", True, now)
    with db.tx() as s:
        assert tokens.principal_for(s, kept, now) is None
    with db.tx() as s:
        users.set_disabled(s, "alice", False, now)
    with db.tx() as s:
        assert tokens.principal_for(s, kept, now) is not None


def test_a_demoted_user_s_admin_token_is_worth_the_new_role(db: Database, now: datetime) -> None:
    with db.tx() as s:
        users.add_user(s, "root", Role.ADMIN, None, now)
        users.add_user(s, "alice", Role.ADMIN, None, now)
        plain = tokens.create_token(s, "alice", "admin", now, scope=Scope.ADMIN)
        users.set_role(s, "alice", Role.VIEWER, now)
    with db.tx() as s:
        who = tokens.principal_for(s, plain, now)
    assert who is not None and who.role == "viewer" and not who.is_admin
    assert who.may(Scope.READ) and not who.may(Scope.SUBMIT)


def test_last_use_is_written_at_most_once_a_minute(db: Database, now: datetime) -> None:
    with db.tx() as s:
        plain = tokens.create_token(s, "root", "admin", now)
    for seconds in (0, 1, 30, 59, 60, 61, 119, 120):
        with db.tx() as s:
            tokens.principal_for(s, plain, now + timedelta(seconds=seconds))
        with db.tx() as s:
            seen = tokens.list_tokens(s, "root")[0].last_used_at
        expected = 0 if seconds < 60 else 60 if seconds < 120 else 120
        assert seen == now + timedelta(seconds=expected), seconds


@pytest.mark.parametrize("seconds", [0, 59, -60, 3653 * 86400 + 1, 1e300, float("nan"), float("inf")])
def test_expiry_is_bounded(now: datetime, seconds: float) -> None:
    with pytest.raises(InvalidInput):
        expiry(now, seconds)
    assert expiry(now, 60) == now + timedelta(minutes=1)
    assert expiry(now, None) is None

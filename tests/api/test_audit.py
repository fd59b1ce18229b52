"""The audit log over a real store: every request that changes something, and every failed
sign-in, is recorded with who, which token, the action, its target, the result and the client;
reads are not; only admins read it; the controller forgets entries after 90 days; nothing
pending is lost when the app shuts down."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.orm import Session

from gpupool.api import auditing
from gpupool.api.app import create_app
from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.audit import AuditEntry, AuditResult
from gpupool.domain.errors import Unavailable
from gpupool.domain.users import Role
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import audit as audit_repo
from gpupool.store import nodes as node_repo
from gpupool.store import users
from gpupool.store.db import Database
from gpupool.store.tokens import create_token, principal_for
from gpupool.usecases import audit as audit_service
from gpupool.usecases import nodes as node_service
from gpupool.usecases.audit import AuditLog
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

with warnings.catch_warnings():  # this starlette asks for httpx2 in its test client; httpx still works
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient


@dataclass
class Api:
    client: TestClient
    admin: dict[str, str]
    admin_token_id: int
    clock: FakeClock
    node: str
    db: Database

    def add_user(self, name: str, role: str = "member") -> dict[str, str]:
        made = self.client.post("/api/v1/users", headers=self.admin, json={"name": name, "role": role})
        assert made.status_code == 201, made.text
        return _bearer(made.json()["token"])

    def audit(self, **params: Any) -> list[dict[str, Any]]:
        got = self.client.get("/api/v1/audit", headers=self.admin, params=params)
        assert got.status_code == 200, got.text
        return list(got.json())


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _row(e: dict[str, Any]) -> tuple[Any, ...]:
    return (e["user"], e["action"], e["target"], e["result"], e["status"])


@pytest.fixture
def api(db: Database, now: datetime) -> Iterator[Api]:
    executor = FakeExecutor(uniform(1, 1))
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), now)
        users.ensure_user(s, "admin", Role.ADMIN, now)
        admin = create_token(s, "admin", "admin", now)
        who = principal_for(s, admin, now)
    assert who is not None and who.token_id is not None
    clock = FakeClock(now)
    ctx = HeadContext(db, clock, executor, lambda: None)
    with TestClient(create_app(ctx)) as client:
        yield Api(client, _bearer(admin), who.token_id, clock, executor.nodes()[0].name, db)


def test_changes_are_recorded_with_who_what_and_how_it_went(api: Api) -> None:
    client, admin = api.client, api.admin
    submitted = client.post("/api/v1/jobs", headers=admin, json={"command": ["sleep", "1"], "gpus": 1})
    assert submitted.status_code == 201, submitted.text
    job = submitted.json()["id"]
    assert submitted.headers["location"] == f"/api/v1/jobs/{job}"
    assert client.post(f"/api/v1/jobs/{job}/cancel", headers=admin).status_code == 200
    assert client.post(f"/api/v1/nodes/{api.node}/drain", headers=admin, json={"reason": "fan"}).status_code == 200
    alice = api.add_user("alice")
    made = client.post("/api/v1/tokens", headers=alice, json={"name": "laptop", "scope": "submit"})
    assert made.status_code == 201, made.text
    token_id = made.json()["id"]
    assert client.delete(f"/api/v1/tokens/{token_id}", headers=alice).status_code == 200
    assert client.put("/api/v1/projects/ml", headers=admin, json={"quota": 2}).status_code == 200
    member = client.put("/api/v1/projects/ml/members/alice", headers=admin, json={"role": "member"})
    assert member.status_code == 200, member.text
    assert client.post("/api/v1/users/alice/disable", headers=admin).status_code == 200
    # reads change nothing: none of these is recorded
    for path in ("/api/v1/jobs", f"/api/v1/jobs/{job}", "/api/v1/nodes", "/api/v1/users", "/api/v1/tokens"):
        assert client.get(path, headers=admin).status_code == 200
    assert client.get("/healthz").status_code == 200

    entries = api.audit()
    assert [_row(e) for e in reversed(entries)] == [
        ("admin", "jobs.submit", f"job {job}", "ok", 201),
        ("admin", "jobs.cancel", f"job {job}", "ok", 200),
        ("admin", "nodes.drain", f"node {api.node}", "ok", 200),
        ("admin", "users.add", "user alice", "ok", 201),
        ("alice", "tokens.create", f"token {token_id}", "ok", 201),
        ("alice", "tokens.revoke", f"token {token_id}", "ok", 200),
        ("admin", "projects.set", "project ml", "ok", 200),
        ("admin", "projects.set_member", "project ml, member alice", "ok", 200),
        ("admin", "users.disable", "user alice", "ok", 200),
    ]
    alice_token = next(e["token_id"] for e in entries if e["action"] == "tokens.create")
    assert {e["token_id"] for e in entries if e["user"] == "admin"} == {api.admin_token_id}
    assert alice_token is not None and alice_token != api.admin_token_id
    assert {e["client"] for e in entries} == {"testclient"}
    assert set(entries[0]) == {"id", "at", "user", "token_id", "action", "target", "result", "status", "client"}
    assert all(datetime.fromisoformat(e["at"]) == api.clock.now() for e in entries)


def test_failed_sign_ins_refusals_and_bad_requests_are_recorded(api: Api) -> None:
    client, admin = api.client, api.admin
    alice = api.add_user("alice")
    assert client.get("/api/v1/jobs", headers=_bearer("gp_not-a-token")).status_code == 401
    api.clock.advance(60)  # a burst of failed sign-ins is written once: these are two bursts
    assert client.post("/api/v1/jobs", json={"command": ["x"]}).status_code == 401  # no token at all
    assert client.post(f"/api/v1/nodes/{api.node}/drain", headers=alice).status_code == 403
    assert client.post("/api/v1/users", headers=admin, json={"name": "bad name"}).status_code == 400
    assert client.post("/api/v1/users", headers=admin, json={"name": "bob", "role": "root"}).status_code == 422
    assert client.post("/api/v1/jobs/999/cancel", headers=admin).status_code == 404
    assert client.post("/api/v1/no-such-route", headers=admin).status_code == 404  # no route: nothing changed
    assert client.get("/api/v1/audit", headers=alice).status_code == 403  # a read: refused, not recorded

    entries = list(reversed(api.audit()))
    assert [_row(e) for e in entries] == [
        ("admin", "users.add", "user alice", "ok", 201),
        (None, "auth.failed", "GET /api/v1/jobs", "denied", 401),
        (None, "auth.failed", "POST /api/v1/jobs", "denied", 401),
        ("alice", "nodes.drain", f"node {api.node}", "denied", 403),
        ("admin", "users.add", "users", "invalid", 400),
        ("admin", "users.add", "users", "invalid", 422),
        ("admin", "jobs.cancel", "job 999", "invalid", 404),
    ]
    assert [e["token_id"] for e in entries[1:3]] == [None, None]
    assert entries[3]["token_id"] is not None and entries[3]["token_id"] != api.admin_token_id
    assert "not-a-token" not in str(entries)


def test_a_crash_is_recorded_as_failed(db: Database, now: datetime, monkeypatch: pytest.MonkeyPatch) -> None:
    executor = FakeExecutor(uniform(1, 1))
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), now)
        users.ensure_user(s, "admin", Role.ADMIN, now)
        admin = _bearer(create_token(s, "admin", "admin", now))

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(node_service, "drain", broken)
    app = create_app(HeadContext(db, FakeClock(now), executor, lambda: None))
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.post(f"/api/v1/nodes/{executor.nodes()[0].name}/drain", headers=admin).status_code == 500
        got = client.get("/api/v1/audit", headers=admin).json()
    assert [(e["action"], e["result"], e["status"]) for e in got] == [("nodes.drain", "failed", 500)]


def test_since_user_and_limit_filter_and_only_admins_read(api: Api) -> None:
    client, admin = api.client, api.admin
    alice = api.add_user("alice")
    viewer = api.add_user("val", role="viewer")
    api.clock.advance(3 * 3600)
    assert client.post("/api/v1/tokens", headers=alice, json={"name": "ci"}).status_code == 201
    assert client.put("/api/v1/projects/ml", headers=admin, json={"quota": 1}).status_code == 200

    assert [e["action"] for e in api.audit(since="1h")] == ["projects.set", "tokens.create"]
    assert [e["action"] for e in api.audit(since="4h")] == ["projects.set", "tokens.create", "users.add", "users.add"]
    start = (api.clock.now() - timedelta(minutes=1)).isoformat()
    assert [e["action"] for e in api.audit(since=start)] == ["projects.set", "tokens.create"]
    assert [e["action"] for e in api.audit(user="alice")] == ["tokens.create"]
    assert [e["action"] for e in api.audit(user="admin", since="1h")] == ["projects.set"]
    assert api.audit(user="nobody") == []
    assert [e["action"] for e in api.audit(limit=1)] == ["projects.set"]

    for who in (alice, viewer):
        refused = client.get("/api/v1/audit", headers=who)
        assert refused.status_code == 403 and refused.json()["code"] == "forbidden", refused.text
    for bad in ("yesterday", "10y", "-1d"):
        got = client.get("/api/v1/audit", headers=admin, params={"since": bad})
        assert got.status_code == 400, got.text
        assert set(got.json()) == {"code", "message"} and got.json()["code"] == "invalid_argument"
    assert client.get("/api/v1/audit", headers=admin, params={"limit": 0}).status_code == 422


def test_the_controller_forgets_entries_after_90_days(db: Database, now: datetime) -> None:
    def entry(at: datetime, action: str) -> AuditEntry:
        return AuditEntry(at, "admin", 1, action, "job 1", AuditResult.OK, 200, "127.0.0.1")

    with db.tx() as s:
        audit_repo.add(s, [entry(now - timedelta(days=91), "old"), entry(now - timedelta(days=89), "recent")])
    clock = FakeClock(now)
    settings = ControllerSettings(usage_every_s=math.inf, telemetry_every_s=math.inf, audit_prune_every_s=math.inf)
    controller = Controller(db, FakeExecutor(uniform(1, 1)), clock, SchedulerConfig(), settings)
    controller.tick()  # the first tick prunes at once
    with db.tx() as s:
        assert [e.action for e in audit_repo.listing(s)] == ["recent"]
        audit_repo.add(s, [entry(now - timedelta(days=100), "late")])
    controller.tick()  # the next prune is an hour (here: never) away
    with db.tx() as s:
        assert [e.action for e in audit_repo.listing(s)] == ["recent", "late"]
        assert audit_repo.prune(s, now - timedelta(days=90)) == 1


def test_a_change_is_in_the_log_before_its_answer_and_sign_ins_by_shutdown(
    db: Database, now: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A head killed right after it answered a change still has its entry: the entry is written
    before the answer leaves. Failed sign-ins wait for the next batch, written at shutdown."""
    monkeypatch.setattr(audit_service, "FLUSH_EVERY_S", 3600.0)  # no batch is written unless asked
    executor = FakeExecutor(uniform(1, 1))
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), now)
        users.ensure_user(s, "admin", Role.ADMIN, now)
        admin = _bearer(create_token(s, "admin", "admin", now))
    app = create_app(HeadContext(db, FakeClock(now), executor, lambda: None))
    log = auditing.audit_log(app)
    with TestClient(app) as client:
        for i in range(20):
            assert client.put(f"/api/v1/projects/p{i}", headers=admin, json={"quota": 1}).status_code == 200
            with db.read() as s:  # already written, as the answer came
                assert audit_repo.listing(s, limit=1)[0].target == f"project p{i}"
        assert log.pending == 0
        for _ in range(5):
            assert client.get("/api/v1/jobs", headers=_bearer("gp_forged")).status_code == 401
        assert log.pending == 1  # the burst's first; the other four are counted
    assert log.pending == 0  # the app's shutdown wrote them, and the burst's count
    with db.tx() as s:
        targets = [e.target for e in audit_repo.listing(s)]
    assert sorted(targets[2:]) == sorted(f"project p{i}" for i in range(20))
    assert sorted(targets[:2]) == sorted(
        ["GET /api/v1/jobs", "4 more failed sign-in(s) from this address over 0s (the last: GET /api/v1/jobs)"]
    )


def test_a_batch_that_cannot_be_written_is_kept_and_written_later(db: Database, now: datetime) -> None:
    log = AuditLog(db, every_s=3600)  # only explicit flushes
    good = AuditEntry(now, "admin", 1, "jobs.submit", "job 1", AuditResult.OK, 201, None)
    log.record(good)
    log.record(AuditEntry(now, "admin", 1, "jobs.submit", "job 2", AuditResult.OK, 201, None))
    assert log.flush() == 2
    assert log.flush() == 0
    broken = AuditLog(Database("sqlite:////nonexistent/dir/db.sqlite"), every_s=3600)
    broken.record(good)
    with pytest.raises(Exception, match=r"(?i)unable to open"):
        broken.flush()
    assert broken.pending == 1
    log.close()
    with db.tx() as s:
        assert [e.target for e in audit_repo.listing(s)] == ["job 2", "job 1"]


def test_a_database_that_is_down_is_tried_once_per_batch_not_once_per_entry(now: datetime) -> None:
    """The database being unavailable says nothing of the entries: the batch is kept whole (in
    order) and the write is not tried again entry by entry, which would cost one more failed
    connection per entry pending (up to 100,000) on every flush while it is down."""

    class Counted(Database):
        tries = 0

        @contextmanager
        def tx(self) -> Iterator[Session]:
            self.tries += 1
            with super().tx() as s:
                yield s

    down = Counted("sqlite:////nonexistent/dir/db.sqlite")
    log = AuditLog(down, every_s=3600)  # only explicit flushes
    for i in range(5):
        log.record(AuditEntry(now, "admin", 1, "jobs.submit", f"job {i}", AuditResult.OK, 201, None))
    with pytest.raises(Unavailable):
        log.flush()
    assert down.tries == 1 and log.pending == 5 and log.lost == 0
    with pytest.raises(Unavailable):
        log.flush()
    assert down.tries == 2 and log.pending == 5


def test_an_anonymous_nul_or_escape_in_a_path_neither_blinds_nor_forges_the_log(api: Api) -> None:
    """``POST /api/v1/%00`` used to put a NUL in an entry: PostgreSQL refused the batch, which was
    tried again forever, and every later entry was lost. Escape sequences in a path printed a
    forged line in `gpupool audit`. Every text is now escaped as it is written."""
    assert api.client.post("/api/v1/%00").status_code == 401
    api.clock.advance(60)  # each its own burst: each written
    assert api.client.post("/api/v1/%1b[2K%1b[1Gforged%E2%80%AEevil").status_code == 401
    assert api.client.put("/api/v1/projects/after", headers=api.admin, json={"quota": 1}).status_code == 200
    entries = api.audit()
    assert [e["target"] for e in reversed(entries)] == [
        "POST /api/v1/\\x00",
        "POST /api/v1/\\x1b[2K\\x1b[1Gforged\\u202eevil",
        "project after",
    ]
    assert all(e["target"].isprintable() for e in entries)


def test_one_entry_the_database_refuses_is_counted_lost_and_never_blocks_the_rest(db: Database, now: datetime) -> None:
    log = AuditLog(db, every_s=3600)  # only explicit flushes
    refused = AuditEntry(now, "admin", 1, "jobs.submit", "job 1", AuditResult.OK, 2**70, None)  # no such status fits
    log.record(refused)
    log.record(AuditEntry(now, "admin", 1, "jobs.submit", "job 2", AuditResult.OK, 201, None))
    assert log.flush() == 1 and log.lost == 1 and log.pending == 0
    log.record(AuditEntry(now, "admin", 1, "jobs.cancel", "job 2", AuditResult.OK, 200, None))
    assert log.flush() == 1
    log.close()
    with db.tx() as s:
        assert [(e.action, e.target) for e in audit_repo.listing(s)] == [
            ("jobs.cancel", "job 2"),
            ("jobs.submit", "job 2"),
        ]


def test_a_flood_of_bad_tokens_is_slowed_and_written_once_with_its_count(api: Api) -> None:
    """Failed sign-ins from one address: the first is recorded, the rest counted; past the limit
    the address gets 429 without its token being looked up, while a token the head knows passes."""
    from gpupool.domain.signins import LIMIT, WINDOW_S

    assert api.client.get("/api/v1/jobs", headers=api.admin).status_code == 200  # a token that works, before
    answers = [api.client.get("/api/v1/jobs", headers=_bearer(f"gp_guess{i}")).status_code for i in range(LIMIT + 30)]
    assert answers[:LIMIT] == [401] * LIMIT and set(answers[LIMIT:]) == {429}
    refused = api.client.get("/api/v1/jobs", headers=_bearer("gp_guess"))
    assert refused.json()["code"] == "too_many_failed_sign_ins" and int(refused.headers["Retry-After"]) >= 1
    assert api.client.get("/api/v1/jobs", headers=api.admin).status_code == 200  # its token is known
    failed = [e for e in api.audit() if e["action"] == "auth.failed"]
    assert len(failed) == 1  # the burst goes on: its first only, so far
    api.clock.advance(WINDOW_S + 1)  # quiet for the window: the burst is over
    assert api.client.get("/api/v1/jobs", headers=_bearer("gp_late")).status_code == 401  # a new burst
    failed = [e for e in api.audit() if e["action"] == "auth.failed"]
    assert len(failed) == 3, failed
    assert f"{LIMIT + 30} more failed sign-in(s) from this address" in failed[1]["target"]


def test_bad_tokens_the_gateway_asks_about_do_not_lock_out_its_address(api: Api) -> None:
    """The gateway asks about its callers' tokens from its own (loopback) address, and throttles
    those callers itself: their failures are counted apart, so a flood of bad tokens sent to
    services does not get the head's local users 429. They are still written once per burst."""
    from gpupool.domain.signins import LIMIT, WINDOW_S

    fresh = api.add_user("local")  # a token that has not worked yet: nothing excuses it from a refusal
    asked = [
        api.client.get("/api/v1/gateway/authorize", headers=_bearer(f"gp_guess{i}")).status_code
        for i in range(LIMIT + 5)
    ]
    assert set(asked) == {401}
    assert api.client.get("/api/v1/jobs", headers=fresh).status_code == 200
    api.clock.advance(WINDOW_S + 1)
    assert api.client.get("/api/v1/jobs", headers=api.admin).status_code == 200  # the burst is written
    failed = [e for e in api.audit() if e["action"] == "auth.failed"]
    assert len(failed) == 2, failed
    assert failed[0]["client"] == "testclient (gateway)"
    assert f"{LIMIT + 4} more failed sign-in(s)" in failed[0]["target"]

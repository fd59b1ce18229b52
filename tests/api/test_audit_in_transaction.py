"""A submission's audit entry is written in its job's transaction by the group commit, not by the
audit writer after it: the job and its entry are in the store together, or neither is."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy.orm import Session

from gpupool.api.app import create_app
from gpupool.clock import FakeClock
from gpupool.domain.audit import AuditEntry
from gpupool.domain.users import Role
from gpupool.sim.cluster import uniform
from gpupool.store import audit as audit_repo
from gpupool.store import nodes as node_repo
from gpupool.store import users
from gpupool.store.db import Database
from gpupool.store.orm import JobRow
from gpupool.store.tokens import create_token
from gpupool.usecases import group_commit
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient


@pytest.fixture
def client(db: Database, now: datetime) -> Iterator[tuple[TestClient, dict[str, str]]]:
    executor = FakeExecutor(uniform(1, 1))
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), now)
        users.ensure_user(s, "admin", Role.ADMIN, now)
        token = create_token(s, "admin", "admin", now)
    with TestClient(create_app(HeadContext(db, FakeClock(now), executor, lambda: None))) as http:
        yield http, {"Authorization": f"Bearer {token}"}


def _stored(db: Database) -> list[tuple[Any, ...]]:
    with db.read() as s:
        return [(e.user, e.action, e.target, e.result.value, e.status) for e in reversed(audit_repo.listing(s))]


def test_a_submissions_entry_is_stored_when_it_is_answered_without_the_audit_writer(
    client: tuple[TestClient, dict[str, str]], db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    http, admin = client
    log = http.app.state.audit  # type: ignore[attr-defined]
    waited: list[int] = []  # the statuses of the entries a request waited for the audit writer to write
    durable = log.durable

    async def counted(entry: AuditEntry) -> None:
        waited.append(entry.status)
        await durable(entry)

    monkeypatch.setattr(log, "durable", counted)
    first = http.post("/api/v1/jobs", headers={**admin, "Idempotency-Key": "k1"}, json={"command": ["x"]})
    assert first.status_code == 201, first.text
    job = first.json()["id"]
    again = http.post("/api/v1/jobs", headers={**admin, "Idempotency-Key": "k1"}, json={"command": ["x"]})
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert waited == [] and log.pending == 0  # never given to the writer: committed with the job
    assert _stored(db) == [("admin", "jobs.submit", f"job {job}", "ok", 201)] * 2
    refused = http.post("/api/v1/jobs", headers=admin, json={"command": ["x"], "gpus": 64})
    assert refused.status_code == 422, refused.text  # no node could ever run it: the writer's, as before
    assert _stored(db)[2:] == [("admin", "jobs.submit", "jobs", "invalid", 422)]
    assert waited == [422]


def test_a_submission_whose_transaction_fails_leaves_neither_job_nor_entry(
    client: tuple[TestClient, dict[str, str]], db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    http, admin = client
    real = group_commit.audit_repo.add

    def add_then_fail(s: Session, entries: Sequence[AuditEntry]) -> None:
        real(s, entries)
        raise RuntimeError("disk on fire")  # the transaction goes back, with the job and the entry

    monkeypatch.setattr(group_commit.audit_repo, "add", add_then_fail)
    failed = TestClient(http.app, raise_server_exceptions=False).post(
        "/api/v1/jobs", headers=admin, json={"command": ["x"]}
    )
    assert failed.status_code == 500, failed.text
    monkeypatch.setattr(group_commit.audit_repo, "add", real)
    http.app.state.audit.flush()  # type: ignore[attr-defined]
    with db.read() as s:
        assert s.query(JobRow).count() == 0
    assert _stored(db) == [("admin", "jobs.submit", "jobs", "failed", 500)]

"""``POST /api/v1/jobs``'s plain ASGI route (api/fast_submit.py) answers exactly as FastAPI's
route does: the same good and bad submissions go to two heads on two identical databases, one
with the plain route and one without, and every answer (status, headers, body bytes) and every
audit entry must be the same."""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gpupool.api import fast_submit
from gpupool.api.app import create_app
from gpupool.clock import FakeClock
from gpupool.domain.users import Role
from gpupool.sim.cluster import uniform
from gpupool.store import audit as audit_repo
from gpupool.store import nodes as node_repo
from gpupool.store import users
from gpupool.store.db import Database
from gpupool.store.tokens import create_token
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

GOOD = {"command": ["sleep", "1"], "gpus": 1}
FULL = {
    "command": ["python", "train.py", "--lr", "0.1"],
    "name": "träning ✓",  # not ASCII: the answer's bytes must still be FastAPI's
    "gpus": 0.5,
    "cpus": "500m",
    "memory": "1G",
    "priority": "train",
    "env": {"A": "1", "B": "é"},
    "workdir": "/tmp",
    "max_runtime_s": 60,
    "max_restarts": 2,
}
JSON = {"Content-Type": "application/json"}


def _case(body: Any, **headers: str) -> tuple[bytes, dict[str, str]]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return raw, {**JSON, **headers}


# (body, headers beyond the caller's token); "viewer"/"none"/"bad" in a header's place pick the token
CASES: list[tuple[str, bytes, dict[str, str]]] = [
    ("good", *_case(GOOD)),
    ("full", *_case(FULL)),
    ("charset", *_case(GOOD, **{"Content-Type": "application/json; charset=utf-8"})),
    ("keyed", *_case(GOOD, **{"Idempotency-Key": "key-1"})),
    ("replayed", *_case(GOOD, **{"Idempotency-Key": "key-1"})),
    ("key reused", *_case({**GOOD, "name": "other"}, **{"Idempotency-Key": "key-1"})),
    ("key with a space", *_case(GOOD, **{"Idempotency-Key": "a b"})),
    ("key too long", *_case(GOOD, **{"Idempotency-Key": "k" * 256})),
    ("key longest", *_case(GOOD, **{"Idempotency-Key": "k" * 255})),
    ("not json", b"{nope", dict(JSON)),
    ("a list", *_case([GOOD])),
    ("empty body", b"", dict(JSON)),
    ("null", *_case(None)),
    ("wrong type", *_case({**GOOD, "gpus": "many"})),
    ("unknown field", *_case({**GOOD, "colour": "red"})),
    ("no command", *_case({"gpus": 1})),
    ("fraction above one", *_case({**GOOD, "gpus": 1.5})),
    ("bad memory", *_case({**GOOD, "memory": "lots"})),
    ("too many gpus", *_case({**GOOD, "gpus": 64})),
    ("no such project", *_case({**GOOD, "project": "nope"})),
    ("text/plain", json.dumps(GOOD).encode(), {"Content-Type": "text/plain"}),
    ("no content type", json.dumps(GOOD).encode(), {}),
    ("viewer", *_case(GOOD, token="viewer")),
    ("no token", *_case(GOOD, token="none")),
    ("bad token", *_case(GOOD, token="bad")),
    ("basic auth", *_case(GOOD, token="basic")),
    ("good again", *_case(GOOD)),
]
SUBMITTED_FAST = {"good", "full", "charset", "keyed", "replayed", "key longest", "good again"}
REFUSED_QUEUED = {"key reused", "too many gpus", "no such project"}  # queued, then refused by the group commit


def _head(db: Database, now: datetime, plain_route: bool) -> tuple[TestClient, dict[str, str]]:
    executor = FakeExecutor(uniform(1, 1))
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), now)
        users.ensure_user(s, "admin", Role.ADMIN, now)
        users.ensure_user(s, "val", Role.VIEWER, now)
        tokens = {"admin": create_token(s, "admin", "admin", now), "viewer": create_token(s, "val", "viewer", now)}
    app = create_app(HeadContext(db, FakeClock(now), executor, lambda: None))
    if not plain_route:
        app.user_middleware = [m for m in app.user_middleware if m.cls is not fast_submit.FastSubmit]
    return TestClient(app, raise_server_exceptions=False), tokens


@pytest.fixture
def heads(sqlite_template: Path, tmp_path: Path, now: datetime) -> Iterator[list[tuple[TestClient, Database]]]:
    made = []
    for name in ("plain", "fastapi"):
        path = tmp_path / f"{name}.sqlite"
        shutil.copyfile(sqlite_template, path)
        db = Database(f"sqlite:///{path}")
        db.migrate()
        made.append((db, _head(db, now, plain_route=name == "plain")))
    yield [(client, tokens, db) for db, (client, tokens) in made]  # type: ignore[misc]
    for db, _ in made:
        db.close()


def _headers(headers: dict[str, str], tokens: dict[str, str]) -> dict[str, str]:
    headers = dict(headers)
    who = headers.pop("token", "admin")
    auth = {
        "admin": f"Bearer {tokens['admin']}",
        "viewer": f"Bearer {tokens['viewer']}",
        "bad": "Bearer gp_not-a-token",
        "basic": "Basic YWRtaW46YWRtaW4=",
    }.get(who)
    return {**headers, **({"Authorization": auth} if auth else {})}


def _both(
    heads: list[Any], monkeypatch: pytest.MonkeyPatch, path: str, cases: list[tuple[str, bytes, dict[str, str]]]
) -> tuple[dict[str, int], int, list[list[tuple[Any, ...]]]]:
    """Send ``cases`` to ``path`` on both heads; the answers must be the same. Each case's status,
    how many the plain route queued itself, and each head's audit entries."""
    taken: list[bool] = []  # for each request the plain route saw: did it submit it itself?
    spec = fast_submit.FastSubmit._spec

    def seen(self: fast_submit.FastSubmit, scope: Any, body: bytes) -> Any:
        made = spec(self, scope, body)
        taken.append(made is not None)
        return made

    monkeypatch.setattr(fast_submit.FastSubmit, "_spec", seen)
    answers: list[list[tuple[int, list[tuple[str, str]], bytes]]] = []
    for client, tokens, _db in heads:
        with client:
            got = []
            for _name, body, headers in cases:
                r = client.post(path, content=body, headers=_headers(headers, tokens))
                got.append((r.status_code, list(r.headers.items()), r.content))
            answers.append(got)
    for (name, _, _), plain, fastapi in zip(cases, *answers, strict=True):
        assert plain == fastapi, name
    statuses = {name: status for (name, _, _), (status, _, _) in zip(cases, answers[0], strict=True)}
    entries = []
    for _client, _tokens, db in heads:
        with db.read() as s:
            entries.append(
                [
                    (e.at, e.user, e.token_id, e.action, e.target, e.result, e.status, e.client)
                    for e in audit_repo.listing(s)
                ]
            )
    return statuses, sum(taken), entries


def test_the_plain_route_answers_every_submission_as_fastapis_route_does(
    heads: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    statuses, taken, entries = _both(heads, monkeypatch, "/api/v1/jobs", CASES)
    assert {n for n, s in statuses.items() if s == 201} == SUBMITTED_FAST
    assert len(set(statuses.values())) >= 6, statuses  # 201, 400, 401, 403, 409, 422 at least
    assert taken == len(SUBMITTED_FAST | REFUSED_QUEUED)  # the plain route queued these itself
    assert entries[0] == entries[1]
    assert len(entries[0]) >= len(SUBMITTED_FAST)


ARRAY = {**GOOD, "array": "0-999%10"}
ARRAY_CASES: list[tuple[str, bytes, dict[str, str]]] = [
    ("array", *_case(ARRAY)),
    ("full array", *_case({**FULL, "array": "1,3,10-20:2"})),
    ("one task", *_case({**GOOD, "array": "7"})),
    ("keyed array", *_case(ARRAY, **{"Idempotency-Key": "arr-1"})),
    ("replayed array", *_case(ARRAY, **{"Idempotency-Key": "arr-1"})),
    ("array key reused", *_case({**ARRAY, "array": "0-9"}, **{"Idempotency-Key": "arr-1"})),
    ("no indices", *_case(GOOD)),
    ("bad indices", *_case({**GOOD, "array": "9-0"})),
    ("too many tasks", *_case({**GOOD, "array": "0-10000"})),
    ("cap of none", *_case({**GOOD, "array": "0-9%0"})),
    ("indices not text", *_case({**GOOD, "array": 5})),
    ("array too many gpus", *_case({**ARRAY, "gpus": 64})),
    ("array unknown field", *_case({**ARRAY, "colour": "red"})),
    ("array viewer", *_case(ARRAY, token="viewer")),
    ("array no token", *_case(ARRAY, token="none")),
    ("array again", *_case(ARRAY)),
]
ARRAYS_FAST = {"array", "full array", "one task", "keyed array", "replayed array", "array again"}


def test_the_plain_route_answers_every_array_as_fastapis_route_does(
    heads: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36: an array is accepted as one record, through the same plain route."""
    statuses, taken, entries = _both(heads, monkeypatch, "/api/v1/arrays", ARRAY_CASES)
    assert {n for n, s in statuses.items() if s == 201} == ARRAYS_FAST
    assert {statuses[n] for n in ("bad indices", "too many tasks", "cap of none")} == {400}
    assert taken == len(ARRAYS_FAST) + 2  # the reused key and the unsatisfiable array: queued, then refused
    # the same entries; a failed sign-in's, queued for the log's writer, may land before or after
    assert sorted(entries[0], key=repr) == sorted(entries[1], key=repr)
    assert len(entries[0]) >= len(ARRAYS_FAST)
    assert {e[4] for e in entries[0] if e[6] == 201} == {f"array {i}" for i in range(1, 6)}

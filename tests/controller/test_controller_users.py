"""Owners and accounting (issue 13) over a real store, on SQLite and PostgreSQL: within a project
the controller starts the jobs of whoever used less first (what they hold now and, decayed, what
they held lately), ``why`` says so, ``gpupool projects`` shows each user's part, ``gpupool jobs``
filters by owner (``--user``, ``--mine``) and ``gpupool report --by user`` splits the GPU-hours."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import httpx
import pytest

from gpupool.api.app import create_app
from gpupool.cli import job_actions as jobs_cli
from gpupool.cli import projects as projects_cli
from gpupool.cli.main import main
from gpupool.client.http import GpupoolClient
from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.domain.projects import DEFAULT_PROJECT
from gpupool.domain.users import Role
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store import user_usage as user_usage_repo
from gpupool.store import users as user_repo
from gpupool.store.db import Database
from gpupool.store.snapshot import load_snapshot
from gpupool.store.tokens import Principal, create_token
from gpupool.usecases import accounting as accounting_service
from gpupool.usecases import jobs as job_service
from gpupool.usecases import projects as project_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor
from tests.support.parity import Scenario, job, replay_on_controller

with warnings.catch_warnings():  # this starlette asks for httpx2 in its test client; httpx still works
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

ALICE = Principal("alice", "member")
BOB = Principal("bob", "member")
QUIET = ControllerSettings(full_cycle_s=0.0, usage_every_s=math.inf)  # no usage history


@dataclass
class Head:
    db: Database
    clock: FakeClock
    executor: FakeExecutor
    controller: Controller
    ctx: HeadContext

    def submit(self, who: Principal, count: int = 1) -> list[int]:
        spec = JobSpec.create(command=["train"], gpus=1)
        return [job_service.submit(self.ctx, spec, who).id for _ in range(count)]

    def tick(self, seconds: float = 1.0) -> None:
        self.clock.advance(seconds)
        self.controller.tick()

    def state(self, job_id: int) -> JobState:
        return job_service.get(self.ctx, job_id).state


def make_head(db: Database, gpus: int, settings: ControllerSettings = QUIET) -> Head:
    clock = FakeClock()
    executor = FakeExecutor(uniform(1, gpus))
    controller = Controller(db, executor, clock, SchedulerConfig(), settings)
    with db.tx() as s:  # what Controller.start() does before its thread runs the ticks
        node_repo.register_nodes(s, executor.nodes(), clock.now())
    return Head(db, clock, executor, controller, HeadContext(db, clock, executor, controller.wake))


def test_within_a_project_the_user_who_holds_less_goes_first_and_why_says_so(db: Database) -> None:
    head = make_head(db, gpus=2)
    a1, a2, a3, a4 = head.submit(ALICE, 4)
    head.tick()
    assert [head.state(j) for j in (a1, a2, a3)] == [JobState.RUNNING, JobState.RUNNING, JobState.PENDING]
    head.tick(5)
    (b1,) = head.submit(BOB)
    head.tick()
    why = job_service.why(head.ctx, a3)
    assert why.code == "resources"
    assert why.message.endswith("; later jobs of bob go first: bob used less of project default lately")
    assert "used less" not in job_service.why(head.ctx, b1).message  # first in line

    head.executor.exit(a1, 0)
    head.tick()
    assert (head.state(b1), head.state(a3)) == (JobState.RUNNING, JobState.PENDING)  # Bob's, though later
    head.executor.exit(a2, 0)
    head.tick()
    assert (head.state(a3), head.state(a4)) == (JobState.RUNNING, JobState.PENDING)  # Alice's own order kept


@pytest.mark.parametrize("accrue", [True, False])
def test_recent_use_is_accrued_per_user_and_lets_who_used_less_go_first(db: Database, accrue: bool) -> None:
    """Alice used the only GPU for 100 s and holds nothing now; her job waits behind Bob's later
    one. Without usage history (``accrue=False``) both hold nothing, and her older job goes first."""
    settings = ControllerSettings(
        full_cycle_s=0.0, usage_every_s=0.0 if accrue else math.inf, fair_share_half_life_s=60.0
    )
    head = make_head(db, gpus=1, settings=settings)
    (a1,) = head.submit(ALICE)
    for _ in range(10):
        head.tick(10)
    head.executor.exit(a1, 0)
    head.tick()
    with db.tx() as s:
        recent = user_usage_repo.recent(s)
        snapshot = load_snapshot(s, head.clock.now())
    assert snapshot.user_usage == recent
    if accrue:
        assert set(recent) == {(DEFAULT_PROJECT, "alice")} and 0.5 < recent[(DEFAULT_PROJECT, "alice")] < 1.0
    else:
        assert recent == {}
    (a2,) = head.submit(ALICE)
    head.clock.advance(1)
    (b1,) = head.submit(BOB)
    head.tick()
    winner, loser = (b1, a2) if accrue else (a2, b1)
    assert (head.state(winner), head.state(loser)) == (JobState.RUNNING, JobState.PENDING)

    if accrue:  # what nobody uses decays, and is forgotten once it weighs nothing
        head.executor.exit(winner, 0)
        head.tick()
        head.executor.exit(loser, 0)
        head.tick()
        head.tick(60)
        with db.tx() as s:
            halved = user_usage_repo.recent(s)
        assert halved[(DEFAULT_PROJECT, "alice")] < recent[(DEFAULT_PROJECT, "alice")] / 2
        head.tick(60 * 20)
        with db.tx() as s:
            assert user_usage_repo.recent(s) == {}


def test_projects_show_each_users_part_least_load_first(db: Database) -> None:
    head = make_head(db, gpus=2)
    head.submit(ALICE, 3)
    head.tick()
    head.submit(BOB, 2)
    head.tick()
    (default,) = [v for v in project_service.listing(head.ctx) if v.project.name == DEFAULT_PROJECT]
    assert [(u.user, u.allocated, u.pending, u.pending_jobs) for u in default.users] == [
        ("bob", 0.0, 2.0, 2),  # holds least: goes first
        ("alice", 2.0, 1.0, 1),
    ]


def test_a_second_user_in_a_project_is_ordered_alike_by_the_simulator_and_the_controller(
    monkeypatch: pytest.MonkeyPatch, db: Database
) -> None:
    two_users = Scenario(
        trace=[
            *(job(f"a{i}", 0, 100, DEFAULT_PROJECT, gpus=1) for i in range(1, 5)),
            replace(job("b1", 1, 100, DEFAULT_PROJECT, gpus=1), user="bob"),
        ],
        projects=[],
        nodes=uniform(1, 2),
    )
    calls = replay_on_controller(monkeypatch, db, two_users)
    first_start = {s.job_id: c.snapshot.now for c in calls for s in c.result.starts}
    assert first_start[5] == first_start[3] < first_start[4]  # Bob's job goes before Alice's fourth


@contextmanager
def api(head: Head) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The app over the head, and a token per user (alice, bob)."""
    tokens = {}
    with head.db.tx() as s:
        for name in ("alice", "bob"):
            user_repo.ensure_user(s, name, Role.MEMBER, head.clock.now())
            tokens[name] = create_token(s, name, "member", head.clock.now())
    with TestClient(create_app(head.ctx)) as app:
        yield app, tokens


def cli(*args: str) -> int:
    """``gpupool ARGS``' exit code."""
    with pytest.raises(SystemExit) as done:
        main(list(args))
    return int(done.value.code or 0)


def test_jobs_by_user_and_mine_through_the_api_and_cli(
    db: Database, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    head = make_head(db, gpus=1)
    with api(head) as (app, tokens):

        def as_user(name: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {tokens[name]}"}

        for name, count in (("alice", 2), ("bob", 1)):
            for _ in range(count):
                made = app.post("/api/v1/jobs", headers=as_user(name), json={"command": ["x"], "gpus": 1})
                assert made.status_code == 201, made.text
        listed = app.get("/api/v1/jobs", params={"user": "alice"}, headers=as_user("bob"))
        assert listed.status_code == 200
        assert [j["owner"] for j in listed.json()] == ["alice", "alice"] and listed.headers["X-Total-Count"] == "2"
        assert len(app.get("/api/v1/jobs", headers=as_user("bob")).json()) == 3
        assert app.get("/api/v1/jobs", params={"user": "nobody"}, headers=as_user("bob")).json() == []
        bad = app.get("/api/v1/jobs", params={"user": "no body"}, headers=as_user("bob"))
        assert bad.status_code == 400 and "invalid user name 'no body'" in bad.json()["message"]

        def through_the_app(request: httpx.Request) -> httpx.Response:
            answer: httpx.Response = app.request(
                request.method, str(request.url), headers=request.headers, content=request.content
            )
            return answer

        def client_as(name: str) -> Callable[[str], GpupoolClient]:
            """The CLI's ``client(url)``, speaking to the app with ``name``'s token."""
            return lambda url: GpupoolClient(
                "http://testserver", tokens[name], transport=httpx.MockTransport(through_the_app)
            )

        monkeypatch.setattr(jobs_cli, "client", client_as("bob"))
        assert cli("jobs", "--mine", "-o", "json") == 0
        assert [j["owner"] for j in json.loads(capsys.readouterr().out)] == ["bob"]
        assert cli("jobs", "--user", "alice", "-o", "json") == 0
        assert [j["owner"] for j in json.loads(capsys.readouterr().out)] == ["alice", "alice"]
        assert cli("jobs", "--user", "carol") == 0
        assert "no jobs of carol pending or running" in capsys.readouterr().out
        assert cli("jobs", "--user", "alice", "--mine") == 2
        assert capsys.readouterr().err.strip() == "error: give --user or --mine, not both"

        head.tick()  # alice's first job takes the GPU
        monkeypatch.setattr(projects_cli, "client", client_as("alice"))
        assert cli("projects", "-o", "json") == 0
        (default,) = [p for p in json.loads(capsys.readouterr().out) if p["name"] == DEFAULT_PROJECT]
        assert default["users"] == [
            {"user": "bob", "allocated": 0.0, "recent_usage": 0.0, "pending": 1.0, "pending_jobs": 1},
            {"user": "alice", "allocated": 1.0, "recent_usage": 0.0, "pending": 1.0, "pending_jobs": 1},
        ]
        assert cli("projects") == 0
        table = capsys.readouterr().out
        assert "USER" in table and table.index("bob") < table.index("alice")


def test_report_by_user_splits_the_gpu_hours_between_two_users(db: Database) -> None:
    head = make_head(db, gpus=4)
    (a1,) = head.submit(ALICE)
    head.submit(BOB, 2)
    head.tick()
    for _ in range(60):
        head.tick()
    head.executor.exit(a1, 0)
    for _ in range(60):
        head.tick()
    report = accounting_service.report(head.ctx, since="1h", by="user")
    by_user = {g.key: g for g in report.groups}
    assert set(by_user) == {"alice", "bob"}
    assert by_user["alice"].gpu_hours == pytest.approx(60 / 3600, rel=0.05)
    assert by_user["bob"].gpu_hours == pytest.approx(2 * 121 / 3600, rel=0.05)
    assert (by_user["alice"].queue.count, by_user["bob"].queue.count) == (1, 2)

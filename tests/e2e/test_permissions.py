"""The permission table, walked against a real head: every route it answers has a rule, and every
(route, caller) pair is allowed or refused as the rules of issue 13 say.

The callers: an admin; the same admin through a read-only token; mia, a manager of project lab;
max, a member of lab who owns the job under test; kim, a member of another project; val, a viewer;
the join token; and nobody (no token). ``expected`` says what each kind of rule lets each of them
do to this world's objects; ``test_the_table_says_what_the_issue_says`` pins the rule of each
route whose rule the issue names, so a wrong rule in the table fails too.
"""

from __future__ import annotations

import itertools
import json
import os
import pwd
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpupool.api.permissions import TABLE
from gpupool.domain.permissions import Rule, Who
from gpupool.domain.users import Scope
from tests.support.headproc import HeadProcess, wait_state
from tests.support.unix_accounts import TestAccounts

pytestmark = pytest.mark.e2e

CALLERS = ("admin", "admin_read", "mia", "max", "kim", "val", "join", "gateway", "nobody")
_fresh = itertools.count(1)


@dataclass
class World:
    head: HeadProcess
    http: httpx.Client
    tokens: dict[str, str | None]
    job: int  # max's job in lab

    def call(self, caller: str, method: str, path: str, body: object = None) -> httpx.Response:
        token = self.tokens[caller]
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self.http.request(method, path, headers=headers, json=body)

    def max_job(self) -> int:
        made = self.call("max", "POST", "/api/v1/jobs", {"command": ["sleep", "600"], "gpus": 0, "project": "lab"})
        assert made.status_code == 201, made.text
        return int(made.json()["id"])

    def max_array(self) -> int:
        made = self.call(
            "max", "POST", "/api/v1/arrays", {"command": ["true"], "gpus": 0, "project": "lab", "array": "0-1"}
        )
        assert made.status_code == 201, made.text
        return int(made.json()["id"])

    def max_service(self) -> str:
        """A service of max's in lab with no replica: nothing runs, so the walk stays cheap."""
        name = f"svc{next(_fresh)}"
        made = self.call(
            "max", "POST", "/api/v1/services", {"name": name, "command": ["true"], "project": "lab", "replicas": 0}
        )
        assert made.status_code == 201, made.text
        return name

    def admin(self, method: str, path: str, body: object = None) -> httpx.Response:
        response = self.call("admin", method, path, body)
        assert response.status_code < 300, (method, path, response.text)
        return response


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, unix_accounts: TestAccounts) -> Iterator[World]:
    # The walk calls every route without a token, and with a join token, from one address: far past
    # the failed sign-ins an address may make in a burst (tests/api/test_audit.py tests that).
    head = HeadProcess(
        tmp_path_factory.mktemp("permissions") / "data", gateway=True, extra=["--sign-in-limit", "0"]
    ).start()
    http = httpx.Client(base_url=head.url, timeout=10, follow_redirects=False)
    try:  # a failing setup must not leave the head running
        tokens: dict[str, str | None] = {
            "admin": head.token(),
            "join": (head.data_dir / "join-token").read_text().strip(),
            "gateway": (head.data_dir / "gateway-token").read_text().strip(),  # the gateway's own identity
        }
        w = World(head, http, tokens, 0)
        w.admin("PUT", "/api/v1/projects/lab", {"quota": 1})
        w.admin("PUT", "/api/v1/projects/vision", {"quota": 1})
        for name, role in [("mia", "member"), ("max", "member"), ("kim", "member"), ("val", "viewer")]:
            person = {"name": name, "role": role, "unix_user": unix_accounts.make(name)}
            tokens[name] = w.admin("POST", "/api/v1/users", person).json()["token"]
        w.admin("PUT", "/api/v1/projects/lab/members/mia", {"role": "manager"})
        w.admin("PUT", "/api/v1/projects/lab/members/max", {"role": "member"})
        w.admin("PUT", "/api/v1/projects/vision/members/kim", {"role": "member"})
        tokens["admin_read"] = w.admin("POST", "/api/v1/tokens", {"scope": "read", "name": "wall"}).json()["token"]
        tokens["nobody"] = None
        w.job = w.max_job()
        with head.client() as client:
            wait_state(client, w.job, ("running",))
        yield w
    finally:
        http.close()
        head.kill_everything()


def expected(rule: Rule, caller: str, method: str, path: str = "") -> bool:
    """The rules of issue 13, for this world's objects (max's job and token, project lab)."""
    if rule.who is Who.PUBLIC:
        return True
    if caller == "nobody":
        return False
    if caller == "join":
        return rule.who is Who.NODE
    if caller == "gateway":
        return rule.who is Who.GATEWAY
    if rule.who in (Who.ADMIN, Who.NODE, Who.GATEWAY):
        return caller == "admin"
    if rule.who is Who.ANYONE:
        return True
    if rule.who is Who.SELF:  # one's own tokens (revoking: max's); never changed through a read-only token
        if method == "DELETE" and path.startswith("/api/v1/tokens/"):
            return caller in ("admin", "max")
        return rule.scope is Scope.READ or caller in ("admin", "mia", "max", "kim")
    if rule.who is Who.MEMBER:  # submitting to lab
        return caller in ("admin", "mia", "max")
    if rule.who is Who.OWNER:  # max's job in lab
        return caller in ("admin", "mia", "max")
    raise AssertionError(f"no expectation for {rule}")


def _target(w: World, method: str, path: str) -> tuple[str, object]:
    """The path with its parameters filled, and a body, such that an allowed call succeeds or is
    refused for a reason other than permission (never 401 or 403). What a call would destroy or
    change is made fresh for it."""
    n = next(_fresh)
    params = {"job_id": str(w.max_job() if path.endswith("/cancel") else w.job), "name": "node-1", "index": "1"}
    if "{array_id}" in path:
        params["array_id"] = str(w.max_array())
    bodies: dict[tuple[str, str], object] = {
        ("POST", "/api/v1/jobs"): {"command": ["true"], "gpus": 0, "project": "lab"},
        ("POST", "/api/v1/jobs:batch"): {"jobs": [{"command": ["true"], "gpus": 0, "project": "lab"}]},
        ("POST", "/api/v1/arrays"): {"command": ["true"], "gpus": 0, "project": "lab", "array": "0-1"},
        ("POST", "/api/v1/cluster/join"): {"name": f"worker{n}"},
        ("POST", "/api/v1/users"): {"name": f"user{n}"},
        ("PUT", "/api/v1/users/{name}/role"): {"role": "viewer"},
        ("PUT", "/api/v1/users/{name}/unix-user"): {"unix_user": pwd.getpwuid(os.geteuid()).pw_name},
        ("POST", "/api/v1/tokens"): {"name": f"t{n}", "scope": "read"},
        ("PUT", "/api/v1/projects/{name}"): {"quota": 0},
        ("POST", "/api/v1/nodes/{name}/calibrate-power"): {"bound_s": 5},
        ("POST", "/api/v1/services"): {"name": f"new{n}", "command": ["true"], "project": "lab", "replicas": 0},
        ("POST", "/api/v1/services/{name}/scale"): {"replicas": 0},
        ("POST", "/api/v1/gateway/stats"): {"window_s": 1, "replicas": []},
        ("POST", "/api/v1/images"): {"path": f"/nonexistent/image{n}.tar", "name": f"image{n}"},  # nodes: 400
        ("PUT", "/api/v1/registries/{registry}"): {"username": "u", "password": f"p{n}"},
        ("POST", "/api/v1/nodes/{name}/power-budget"): {"budget": None},
    }
    params["registry"] = "nvcr.io"  # one's own login there (forgetting one never made: 404, not 403)
    if path.startswith("/api/v1/services/"):
        params["name"] = w.max_service()
    if path.startswith("/api/v1/projects/"):
        params["name"] = f"tmp{n}" if path == "/api/v1/projects/{name}" and method != "GET" else "lab"
        if method == "DELETE" and path == "/api/v1/projects/{name}":
            w.admin("PUT", f"/api/v1/projects/tmp{n}", {"quota": 0})
        if "{user}" in path:
            params["user"] = f"someone{n}"
            w.admin("POST", "/api/v1/users", {"name": f"someone{n}"})
            if method == "DELETE":
                w.admin("PUT", f"/api/v1/projects/lab/members/someone{n}")
    elif path.startswith("/api/v1/users/"):
        params["name"] = f"user{n}"
        w.admin("POST", "/api/v1/users", {"name": f"user{n}"})
    elif method == "DELETE" and path.startswith("/api/v1/tokens/"):
        params["token_id"] = str(w.admin("POST", "/api/v1/tokens", {"user": "max", "name": f"t{n}"}).json()["id"])
    return path.format(**params), bodies.get((method, path))


def test_the_table_says_what_the_issue_says() -> None:
    changing = {key: rule for key, rule in TABLE.items() if key[0] != "GET"}
    assert all(rule.who is not Who.ANYONE for rule in changing.values())
    # a node or the gateway by their own identities; people need an admin token there
    assert all(rule.scope is not Scope.READ or rule.who in (Who.NODE, Who.GATEWAY) for rule in changing.values())
    named = {
        ("POST", "/api/v1/jobs"): Who.MEMBER,
        ("POST", "/api/v1/jobs/{job_id}/cancel"): Who.OWNER,
        ("GET", "/api/v1/jobs/{job_id}/logs"): Who.OWNER,
        ("GET", "/api/v1/jobs"): Who.ANYONE,
        ("POST", "/api/v1/jobs:batch"): Who.MEMBER,
        ("POST", "/api/v1/arrays"): Who.MEMBER,
        ("POST", "/api/v1/arrays/{array_id}/cancel"): Who.OWNER,
        ("POST", "/api/v1/nodes/{name}/drain"): Who.ADMIN,
        ("POST", "/api/v1/nodes/{name}/undrain"): Who.ADMIN,
        ("POST", "/api/v1/nodes/{name}/calibrate-power"): Who.ADMIN,
        ("GET", "/api/v1/power-curves"): Who.ANYONE,
        ("POST", "/api/v1/nodes/{name}/power-budget"): Who.ADMIN,
        ("PUT", "/api/v1/projects/{name}"): Who.ADMIN,
        ("PUT", "/api/v1/projects/{name}/members/{user}"): Who.ADMIN,
        ("POST", "/api/v1/users"): Who.ADMIN,
        ("POST", "/api/v1/tokens"): Who.SELF,
        ("GET", "/metrics"): Who.ANYONE,
        ("GET", "/api/v1/report"): Who.ANYONE,
        ("GET", "/api/v1/nodes"): Who.ANYONE,
        ("POST", "/api/v1/services"): Who.MEMBER,
        ("GET", "/api/v1/services"): Who.ANYONE,
        ("POST", "/api/v1/services/{name}/scale"): Who.OWNER,
        ("DELETE", "/api/v1/services/{name}"): Who.OWNER,
        ("GET", "/api/v1/gateway/routes"): Who.GATEWAY,
        ("POST", "/api/v1/gateway/stats"): Who.GATEWAY,
        ("GET", "/api/v1/images"): Who.ANYONE,
        ("POST", "/api/v1/images"): Who.ADMIN,
        ("PUT", "/api/v1/registries/{registry}"): Who.SELF,
        ("DELETE", "/api/v1/registries/{registry}"): Who.SELF,
    }
    assert {key: TABLE[key].who for key in named} == named


def test_every_route_of_the_head_has_a_rule(world: World) -> None:
    """The table is the one list: what the running head's OpenAPI lists is in it."""
    documented = world.http.get("/openapi.json").json()["paths"]
    answered = {(m.upper(), p) for p, ops in documented.items() for m in ops}
    assert answered, "the head documents no routes"
    assert answered <= TABLE.keys(), f"routes without a rule: {sorted(answered - TABLE.keys())}"


@pytest.mark.parametrize(("method", "path"), sorted(TABLE), ids=[f"{m} {p}" for m, p in sorted(TABLE)])
def test_each_caller_is_allowed_or_refused_as_the_rule_says(world: World, method: str, path: str) -> None:
    rule = TABLE[(method, path)]
    wrong = []
    for caller in CALLERS:
        url, body = _target(world, method, path)
        response = world.call(caller, method, url, body)
        allowed = response.status_code not in (401, 403)
        if allowed != expected(rule, caller, method, path):
            wrong.append(f"{caller}: {response.status_code} {response.text[:160]}")
        elif not allowed:
            error = response.json()
            assert set(error) == {"code", "message"} and error["message"], error
    assert not wrong, f"{method} {path} ({rule.describe()}):\n" + "\n".join(wrong)


def test_the_queue_is_public_but_what_runs_inside_a_job_is_not(world: World) -> None:
    """Everyone sees max's job in listings; only max, lab's manager and an admin see its command
    and environment; a member acting on another's job hears which rule refused it."""
    seen: dict[str, object] = {}
    for caller in ("admin", "admin_read", "mia", "max", "kim", "val"):
        listing = world.call(caller, "GET", "/api/v1/jobs").json()
        job = next(j for j in listing if j["id"] == world.job)
        assert (job["owner"], job["project"], job["state"]) == ("max", "lab", "running")
        shown = world.call(caller, "GET", f"/api/v1/jobs/{world.job}").json()
        assert shown["command"] == job["command"] and shown["env"] == job["env"]
        seen[caller] = job["command"]
    assert seen == {
        "admin": ["sleep", "600"],
        "admin_read": None,
        "mia": ["sleep", "600"],
        "max": ["sleep", "600"],
        "kim": None,
        "val": None,
    }
    refused = world.call("kim", "POST", f"/api/v1/jobs/{world.job}/cancel")
    assert refused.status_code == 403 and refused.json()["code"] == "not_your_job"
    assert "it is max's" in refused.json()["message"] and "owner" in refused.json()["message"]
    logs = world.call("kim", "GET", f"/api/v1/jobs/{world.job}/logs")
    assert logs.status_code == 403 and logs.json()["code"] == "not_your_job"
    not_member = world.call("kim", "POST", "/api/v1/jobs", {"command": ["true"], "project": "lab", "gpus": 0})
    assert not_member.status_code == 403 and not_member.json()["code"] == "not_a_member"
    assert "gpupool project add-member lab kim" in not_member.json()["message"]
    unknown = world.call("admin", "POST", "/api/v1/jobs", {"command": ["true"], "project": "nope", "gpus": 0})
    assert unknown.status_code == 404 and unknown.json()["code"] == "project_not_found"
    assert world.call("kim", "POST", "/api/v1/jobs", {"command": ["true"], "gpus": 0}).status_code == 201


def _cli_json(head: HeadProcess, token: str | None, *args: str) -> Any:
    out = head.cli(*args, "-o", "json", token=token)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_members_through_the_cli(world: World, tmp_path: Path) -> None:
    head = world.head
    listed = _cli_json(head, None, "project", "members", "lab")
    assert [(m["user"], m["role"]) for m in listed if m["user"] in ("max", "mia", "kim")] == [
        ("max", "member"),
        ("mia", "manager"),
    ]
    users = {u["name"]: u["projects"] for u in _cli_json(head, None, "user", "list")}
    assert users["mia"] == ["lab"] and users["kim"] == ["vision"] and users["val"] == []
    refused = head.cli("project", "add-member", "lab", "kim", token=world.tokens["max"])
    assert refused.returncode == 2 and "an admin" in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert head.cli("project", "add-member", "lab", "nobody-here").returncode == 2
    assert head.cli("project", "add-member", "lab", "kim", "--role", "manager").returncode == 0
    assert ("kim", "manager") in [(m["user"], m["role"]) for m in _cli_json(head, None, "project", "members", "lab")]
    assert head.cli("project", "remove-member", "lab", "kim").returncode == 0
    gone = head.cli("project", "remove-member", "lab", "kim")
    assert gone.returncode == 2 and "not a member" in gone.stderr

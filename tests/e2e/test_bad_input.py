"""Bad input: one clear line and exit code 2 from the CLI; HTTP 4xx with {code, message} from the API;
never a traceback, never a half-written record."""

from __future__ import annotations

import httpx
import pytest

from tests.support.headproc import HeadProcess

pytestmark = pytest.mark.e2e


@pytest.fixture
def head(shared_head: HeadProcess) -> HeadProcess:
    """Bad input changes nothing, so every test here shares one head; that is also what lets
    test_rejected_submissions_leave_no_record see the whole module's refusals."""
    return shared_head


CLI_CASES = [
    (["submit", "--gpus", "-1", "--", "true"], "gpus must not be negative"),
    (["submit", "--gpus", "1.5", "--", "true"], "neither a whole number nor a fraction"),
    (["submit", "--gpus", "16", "--", "true"], "more than any node has (at most 4)"),
    (["submit", "--priority", "urgent", "--", "true"], "unknown priority 'urgent'"),
    (["submit", "--memory", "lots", "--", "true"], "malformed memory size 'lots'"),
    (["submit", "--memory", "8M", "--", "true"], "--memory 8M is below the least a worker can start with (32M)"),
    (["submit", "--memory", "4T", "--", "true"], "4194304 MiB memory per worker is more than any node has"),
    (["submit", "--"], "empty command"),
    (["submit", "--gpus", "two", "--", "true"], "Invalid value for '--gpus'"),
    (["submit", "--env", "NOEQUALS", "--", "true"], "is not K=V"),
    (["submit", "--cpus", "4096", "--", "true"], "CPU cores per worker is more than any node has"),
    (["submit", "--gpu-model", "B200", "--", "true"], "no node has a GPU of model B200"),
    (["submit", "--checkpoint-dir", "", "--", "true"], "checkpoint dir must be a non-empty path"),
    (["show", "999"], "no job 999"),
    (["why", "999"], "no job 999"),
    (["logs", "999"], "no job 999"),
    (["cancel", "999"], "no job 999"),
    (["wait", "abc"], "'abc' is not a job id: use ID, or ID_INDEX"),
    (["jobs", "-o", "yaml"], "'yaml' is not one of"),
    (["frobnicate"], "No such command 'frobnicate'"),
    (["submit", "--gpu-power", "turbo", "--", "true"], "'turbo' is not max, efficient or a power such as 400W"),
    (["submit", "--gpus", "0", "--gpu-power", "efficient", "--", "true"], "--gpu-power needs GPUs"),
    (["project", "set", "lab", "--gpu-power", "fast"], "'fast' is not max, efficient or a power"),
    (["node", "calibrate-power", "--bound", "1"], "--bound 1 is out of range: 5 to 600 seconds"),
]


@pytest.mark.parametrize(("args", "message"), CLI_CASES, ids=[" ".join(a) for a, _ in CLI_CASES])
def test_cli_bad_input_is_one_line_and_exit_code_2(head: HeadProcess, args: list[str], message: str) -> None:
    result = head.cli(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert message in lines[0]


def test_rejected_submissions_leave_no_record(head: HeadProcess) -> None:
    for args, _ in CLI_CASES[:3]:
        head.cli(*args)
    with head.client() as c:
        assert c.jobs(include_finished=True) == []


def api(head: HeadProcess, method: str, path: str, **kwargs: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {head.token()}", **kwargs.pop("headers", {})}  # type: ignore[dict-item]
    return httpx.request(method, head.url + path, headers=headers, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [
        (
            "POST",
            "/api/v1/jobs",
            {"content": b"{not json", "headers": {"Content-Type": "application/json"}},
            400,
            "malformed_json",
        ),
        ("POST", "/api/v1/jobs", {"json": {"command": ["true"], "gpus": -2}}, 400, "invalid_argument"),
        ("POST", "/api/v1/jobs", {"json": {"command": []}}, 400, "invalid_argument"),
        ("POST", "/api/v1/jobs", {"json": {"gpus": 1}}, 422, "invalid_argument"),
        ("POST", "/api/v1/jobs", {"json": {"command": ["true"], "colour": "red"}}, 422, "invalid_argument"),
        ("POST", "/api/v1/jobs", {"json": {"command": ["true"], "gpus": 5}}, 422, "unsatisfiable"),
        ("POST", "/api/v1/jobs", {"json": {"command": ["true"], "memory": "1M"}}, 400, "memory_too_low"),
        # Issue 15: numbers past what a column or the clock holds, text that lies on screen, sizes
        # that would lose the job at launch: each a 4xx at the edge, never a 500.
        ("POST", "/api/v1/jobs", {"json": {"command": ["true"], "max_restarts": 2**70}}, 400, "invalid_argument"),
        ("POST", "/api/v1/jobs", {"json": {"command": ["true"], "max_runtime_s": 2**70}}, 400, "invalid_argument"),
        ("POST", "/api/v1/jobs", {"json": {"command": ["true"], "cpus": 2**70}}, 400, "invalid_argument"),
        ("POST", "/api/v1/jobs", {"json": {"command": ["true"], "gpus": 1e308}}, 400, "invalid_argument"),
        ("POST", "/api/v1/jobs", {"json": {"command": ["true"], "memory": "9999999T"}}, 400, "invalid_argument"),
        ("POST", "/api/v1/jobs", {"json": {"command": ["true"], "env": {"A": "x\u0000y"}}}, 400, "invalid_argument"),
        ("POST", "/api/v1/jobs", {"json": {"command": ["true"], "env": {"A": "x" * 200_000}}}, 400, "invalid_argument"),
        ("POST", "/api/v1/jobs", {"json": {"command": ["true"], "workdir": "/" + "w" * 8000}}, 400, "invalid_argument"),
        ("POST", "/api/v1/jobs", {"json": {"command": ["true"], "name": "evil\u202etxt.sh"}}, 400, "invalid_argument"),
        ("POST", "/api/v1/jobs", {"json": {"command": ["true"], "gpu_model": "A100\x1b[2J"}}, 400, "invalid_argument"),
        ("POST", "/api/v1/jobs", {"json": {"command": ["x"] * 5000}}, 400, "invalid_argument"),
        ("PUT", "/api/v1/projects/p1", {"json": {"quota": 1e308}}, 400, "invalid_argument"),
        ("GET", f"/api/v1/jobs/{2**70}", {}, 422, "invalid_argument"),
        ("GET", "/api/v1/jobs/0", {}, 422, "invalid_argument"),
        ("GET", f"/api/v1/jobs/1/logs?offset={2**62}", {}, 422, "invalid_argument"),
        ("GET", "/api/v1/jobs/1/logs?worker=-1", {}, 422, "invalid_argument"),
        ("DELETE", f"/api/v1/tokens/{2**70}", {}, 422, "invalid_argument"),
        ("GET", "/api/v1/nodes/node-1/telemetry?since=9999999999d", {}, 400, "invalid_argument"),
        ("GET", "/api/v1/telemetry/latest?since=0001-01-01", {}, 400, "invalid_argument"),
        ("GET", "/api/v1/report?since=0001-01-01", {}, 400, "invalid_argument"),
        ("GET", "/api/v1/report?since=9999999999d", {}, 400, "invalid_argument"),
        ("GET", "/api/v1/report?until=9999-12-31", {}, 400, "invalid_argument"),
        ("POST", "/api/v1/jobs", {"json": {"command": ["true"], "priority": "vip"}}, 400, "invalid_argument"),
        # Issue 30: every integer bounded, names as user names, a working directory absolute.
        ("POST", "/api/v1/nodes/node-1/drain", {"json": {"gpu": 2**70}}, 422, "invalid_argument"),
        ("POST", "/api/v1/nodes/node-1/undrain", {"json": {"gpu": 2**31}}, 422, "invalid_argument"),
        ("GET", f"/api/v1/nodes/node-1/telemetry?gpu={2**70}", {}, 422, "invalid_argument"),
        ("GET", f"/api/v1/jobs?limit={2**70}", {}, 422, "invalid_argument"),
        ("GET", "/api/v1/jobs?limit=0", {}, 422, "invalid_argument"),
        ("GET", "/api/v1/report?since=" + "1" * 65, {}, 422, "invalid_argument"),
        ("POST", "/api/v1/tokens", {"json": {"name": "laptop\x1b[2J"}}, 400, "invalid_argument"),
        ("POST", "/api/v1/tokens", {"json": {"name": "[red]x"}}, 400, "invalid_argument"),
        ("POST", "/api/v1/jobs", {"json": {"command": ["true"], "workdir": "relative/dir"}}, 400, "invalid_argument"),
        ("GET", "/api/v1/jobs/424242", {}, 404, "job_not_found"),
        ("GET", "/api/v1/jobs/abc", {}, 422, "invalid_argument"),
        ("POST", "/api/v1/jobs/424242/cancel", {}, 404, "job_not_found"),
        ("GET", "/api/v1/nodes/nope", {}, 404, "node_not_found"),
        ("GET", "/api/v1/nowhere", {}, 404, "not_found"),
        ("DELETE", "/api/v1/jobs", {}, 405, "method_not_allowed"),
    ],
)
def test_api_errors_are_4xx_with_code_and_message(
    head: HeadProcess, method: str, path: str, kwargs: dict[str, object], status: int, code: str
) -> None:
    response = api(head, method, path, **kwargs)
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"code", "message"}
    assert body["code"] == code
    assert body["message"] and "\n" not in body["message"]


@pytest.mark.parametrize("token", [None, "gp_wrong"])
def test_requests_without_a_valid_token_get_401(head: HeadProcess, token: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    for method, path in [("GET", "/api/v1/jobs"), ("POST", "/api/v1/jobs"), ("GET", "/api/v1/nodes")]:
        response = httpx.request(method, head.url + path, headers=headers, json={"command": ["true"]})
        assert response.status_code == 401
        assert response.json()["code"] == "unauthorized"
    assert httpx.get(head.url + "/healthz").status_code == 200


def test_cli_with_a_wrong_token_says_so_in_one_line(head: HeadProcess) -> None:
    import os
    import subprocess
    import sys

    env = {**head.env(), "GPUPOOL_TOKEN": "gp_wrong"}
    result = subprocess.run(
        [sys.executable, "-m", "gpupool.cli.main", "jobs"], capture_output=True, text=True, env=env, timeout=30
    )
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error: invalid token")
    assert os.stat(head.data_dir / "admin-token").st_mode & 0o777 == 0o600


def test_cli_without_a_head_says_how_to_start_one(head_factory: type[HeadProcess]) -> None:
    nobody = head_factory()
    result = nobody.cli("jobs")
    assert result.returncode == 1
    assert "cannot reach the gpupool head" in result.stderr and "gpupool up" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


UP_CASES = [
    (["--db", "bogus"], "malformed database URL"),
    (["--db", "bogus://x"], "unknown database driver"),
    (["--db", "postgresql://nobody@127.0.0.1:1/x"], "cannot open the database"),
    (["--port", "99999"], "Invalid value for '--port'"),
    (["--gateway-port", "99999"], "Invalid value for '--gateway-port'"),
    (["--autoscale-window", "0s"], "--autoscale-window must be between"),
    (["--max-slowdown", "95"], "Invalid value for '--max-slowdown'"),
    (["--fake-nodes", "0"], "--fake-nodes must be >= 1"),
    (["--placement", "magic"], "unknown placement 'magic'"),
    (["--fair-share-half-life", "soon"], "malformed duration"),
    (["--fake-hardware", "/nonexistent/hw.json"], "cannot read the hardware description"),
]


@pytest.mark.parametrize(("args", "message"), UP_CASES, ids=[" ".join(a) for a, _ in UP_CASES])
def test_up_with_bad_options_says_so_in_one_line(
    head_factory: type[HeadProcess], tmp_path: object, args: list[str], message: str
) -> None:
    probe = head_factory()
    result = probe.cli("up", "--data-dir", str(probe.data_dir), "--port", str(probe.port), *args, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr

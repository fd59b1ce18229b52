"""Issue 17 end to end, through the gateway the head starts (``gpupool up --gateway-port 0``):
real replica processes (tests/support/replica_server.py), real HTTP, real tokens.

One head for the module, with short intervals (``--autoscale-window 2s``, delays of 2 s); each
test serves a service of its own in project ``lab``, where ``max`` is a member and ``kim`` is
not. Nothing here asserts a duration: waits are bounded by ``wait_for`` and by the clients'
timeouts, and what is checked is what happened (status codes, counts, paths, headers).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpupool.client import GpupoolClient
from tests.support import DIAL, REPLICA_SERVER
from tests.support.dial import dialed
from tests.support.headproc import HeadProcess, free_port, pid_alive, wait_for, wait_state
from tests.support.unix_accounts import TestAccounts

pytestmark = pytest.mark.e2e

SERVER = REPLICA_SERVER
# A job of max's runs as max's Unix account (as root), which cannot read the venv under /root.
SYSTEM_PYTHON = "/usr/bin/python3" if os.geteuid() == 0 and Path("/usr/bin/python3").exists() else sys.executable
WAIT = 60


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeadProcess]:
    made = HeadProcess(
        tmp_path_factory.mktemp("gateway") / "data", gateway=True, extra=["--autoscale-window", "2s"]
    ).start()
    yield made
    made.kill_everything()


@pytest.fixture(scope="module")
def client(head: HeadProcess) -> Iterator[GpupoolClient]:
    with head.client() as c:
        yield c


@pytest.fixture(scope="module")
def tokens(head: HeadProcess, client: GpupoolClient, unix_accounts: TestAccounts) -> dict[str, str]:
    client.set_project("lab", quota=4, limit=None, weight=1, everyone=False)
    made = {user: str(client.add_user(user, unix_user=unix_accounts.make(user))["token"]) for user in ("max", "kim")}
    client.add_member("lab", "max")
    return {**made, "admin": head.token()}


def call(head: HeadProcess, path: str, token: str | None = None, timeout: float = 30) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"{head.gateway_url}{path}", headers=headers, timeout=timeout)


def serve(head: HeadProcess, name: str, *args: str) -> dict[str, Any]:
    out = head.cli("serve", name, "-o", "json", "--project", "lab", "--gpus", "0", *args, "--", sys.executable, SERVER)
    assert out.returncode == 0, out.stderr + "".join(head.output[-30:])
    return dict(json.loads(out.stdout))


def publish(head: HeadProcess, port: int, token: str) -> int:
    """A job of project lab serving on ``port`` and publishing it (``--expose``): its id."""
    out = head.cli(
        "submit", "--project", "lab", "--gpus", "0", "--expose", str(port), "--env", f"PORT={port}",
        "--workdir", "/tmp", "--", SYSTEM_PYTHON, SERVER, token=token,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def routed(head: HeadProcess, name: str, admin: str) -> None:
    """Wait until the gateway answers for ``name`` through a ready replica."""
    wait_for(lambda: call(head, f"/{name}/pid", admin).status_code == 200, WAIT, 0.2, f"the gateway to route {name}")


def in_gateway_metrics(head: HeadProcess, admin: str, text: str) -> bool:
    return text in call(head, "/metrics", admin).text


def test_a_request_reaches_a_ready_replica_with_its_prefix_stripped_and_no_token(
    head: HeadProcess, client: GpupoolClient, tokens: dict[str, str]
) -> None:
    made = serve(head, "api", "--replicas", "1")
    assert made["url"] == f"{head.gateway_url}/api/"
    routed(head, "api", tokens["admin"])
    got = call(head, "/api/echo/x?q=1", tokens["max"])
    assert got.status_code == 200, got.text
    seen = got.json()
    assert seen["path"] == "/echo/x?q=1"
    assert "authorization" not in seen["headers"]  # the caller's token stays at the gateway
    assert (seen["headers"]["x-gpupool-user"], seen["headers"]["x-gpupool-project"]) == ("max", "lab")
    assert seen["headers"]["x-forwarded-prefix"] == "/api"
    assert seen["pid"] in {int(call(head, "/api/pid", tokens["admin"]).text)}


def test_a_non_member_gets_403_no_token_401_and_public_needs_none(
    head: HeadProcess, client: GpupoolClient, tokens: dict[str, str]
) -> None:
    nobody = call(head, "/api/pid")
    assert nobody.status_code == 401 and nobody.json()["code"] == "unauthorized"
    stranger = call(head, "/api/pid", tokens["kim"])
    assert stranger.status_code == 403 and set(stranger.json()) == {"code", "message"}
    assert call(head, "/api/pid", tokens["max"]).status_code == 200
    jobs = {r["job_id"] for r in client.service("api")["replica_list"]}
    serve(head, "api", "--replicas", "1", "--public")  # only the gateway's settings change: no roll
    wait_for(lambda: call(head, "/api/pid").status_code == 200, WAIT, 0.2, "api to be public")
    assert call(head, "/api/pid", tokens["kim"]).status_code == 200
    # The services guide's own example (docs/guide/services.md) calls a public service with the admin token: it must not reach it.
    seen = httpx.get(
        f"{head.gateway_url}/api/echo/x",
        headers={"Authorization": f"Bearer {tokens['admin']}", "X-Gpupool-User": "admin"},
        timeout=30,
    ).json()
    assert not {"authorization", "x-gpupool-user", "x-gpupool-project"} & set(seen["headers"]), seen
    assert {r["job_id"] for r in client.service("api")["replica_list"]} == jobs


def test_past_the_cap_and_the_queue_a_request_gets_429_with_retry_after(
    head: HeadProcess, tokens: dict[str, str]
) -> None:
    serve(head, "tight", "--replicas", "1", "--max-concurrency", "1", "--queue-limit", "0")
    admin = tokens["admin"]
    routed(head, "tight", admin)
    slow: list[httpx.Response] = []
    holder = threading.Thread(target=lambda: slow.append(call(head, "/tight/slow?s=3", admin)))
    holder.start()
    busy = 'gpupool_gateway_in_flight{replica="'
    wait_for(lambda: any(busy in line and 'route="tight"' in line and line.endswith(" 1.0")
                         for line in call(head, "/metrics", admin).text.splitlines()),
             WAIT, 0.05, "the slow request to hold tight's only slot")  # fmt: skip
    refused = call(head, "/tight/pid", admin)
    assert refused.status_code == 429 and refused.json()["code"] == "overloaded"
    assert int(refused.headers["Retry-After"]) >= 1
    holder.join(timeout=40)
    assert [r.status_code for r in slow] == [200]


def test_a_replica_killed_mid_load_costs_no_request_and_is_replaced(
    head: HeadProcess, client: GpupoolClient, tokens: dict[str, str]
) -> None:
    serve(head, "sturdy", "--replicas", "2", "--timeout", "20s")
    admin = tokens["admin"]
    s = wait_for(lambda: _ready(client, "sturdy", 2), WAIT, 0.2, "sturdy to have 2 ready replicas")
    routed(head, "sturdy", admin)
    before = {r["job_id"] for r in s["replica_list"]}
    victim = s["endpoints"][0]
    pid = int(httpx.get(f"http://{victim['host']}:{victim['port']}/pid", timeout=5).text)
    stop = threading.Event()
    codes: list[int] = []
    errors: list[str] = []

    def load() -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {admin}"}, timeout=40) as http:
            while not stop.is_set():
                try:
                    codes.append(http.get(f"{head.gateway_url}/sturdy/slow?s=0.2").status_code)
                except httpx.HTTPError as exc:  # a hang past the client's timeout lands here
                    errors.append(repr(exc))

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(codes) >= 8, WAIT, 0.05, "load to flow")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not pid_alive(pid), WAIT, 0.05, "the replica to die")
        after = wait_for(  # started again: the same replica (job), a new process after the restart back-off
            lambda: (x := _ready(client, "sturdy", 2)) and any(r["restarts"] for r in x["replica_list"]) and x,
            WAIT,
            0.2,
            "the killed replica to be started again",
        )
        count = len(codes)
        wait_for(lambda: len(codes) >= count + 8, WAIT, 0.05, "load to flow through the replacement")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert errors == []
    assert set(codes) == {200}, sorted(set(codes))  # GETs caught by the death were sent again
    assert {r["job_id"] for r in after["replica_list"]} == before  # one job's restart, not a new job
    assert sum(r["restarts"] for r in after["replica_list"]) == 1


def test_autoscaling_follows_load_up_and_down(head: HeadProcess, client: GpupoolClient, tokens: dict[str, str]) -> None:
    serve(
        head,
        "elastic",
        *("--min-replicas", "1", "--max-replicas", "3", "--target-concurrency", "1", "--scale-down-delay", "2s"),
    )
    admin = tokens["admin"]
    routed(head, "elastic", admin)
    stop = threading.Event()
    codes: list[int] = []

    def load() -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {admin}"}, timeout=60) as http:
            while not stop.is_set():
                codes.append(http.get(f"{head.gateway_url}/elastic/slow?s=0.3").status_code)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        grown = wait_for(
            lambda: (s := client.service("elastic"))["replicas"]["ready"] >= 2 and s, WAIT, 0.2, "elastic to grow"
        )
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert grown["replicas"]["desired"] >= 2 and set(codes) == {200}
    shrunk = wait_for(
        lambda: (s := client.service("elastic"))["replicas"]["desired"] == 1 and s,
        WAIT,
        0.2,
        "elastic to shrink once quiet",
    )
    assert shrunk["min_replicas"] == 1


def test_a_service_scaled_to_zero_wakes_for_its_first_request(
    head: HeadProcess, client: GpupoolClient, tokens: dict[str, str]
) -> None:
    made = serve(
        head, "cold", "--min-replicas", "0", "--max-replicas", "1", "--scale-to-zero", "--scale-down-delay", "2s"
    )
    assert (made["replicas"]["desired"], made["state"]) == (0, "idle")
    admin = tokens["admin"]
    routes = {r["name"]: r for r in client.gateway_routes()["routes"]}
    assert routes["cold"]["endpoints"] == [] and routes["cold"]["scale_to_zero"] is True
    wait_for(lambda: in_gateway_metrics(head, admin, 'route="cold"'), WAIT, 0.2, "the gateway to know cold")
    first = call(head, "/cold/pid", admin, timeout=90)  # held until the replica it woke is ready
    assert first.status_code == 200 and first.text.isdigit()
    # ready once the gateway says it routes to it: its next load report, within a second or so
    wait_for(lambda: client.service("cold")["replicas"]["ready"] == 1, WAIT, 0.1, "cold to read ready")
    wait_for(lambda: client.service("cold")["replicas"]["desired"] == 0, WAIT, 0.2, "cold to sleep again")


def test_a_service_reads_ready_only_once_the_gateway_routes_to_it(
    head: HeadProcess, client: GpupoolClient, tokens: dict[str, str]
) -> None:
    """The first request after `2/2 ready` used to get 503 no_replica now and then: the head said
    ready before the gateway's next look at the routes. Ready now means routed."""
    for name in ("prompt1", "prompt2", "prompt3"):
        serve(head, name, "--replicas", "1")
        wait_for(lambda n=name: client.service(n)["replicas"]["ready"] == 1, WAIT, 0.02, f"{name} to read ready")  # type: ignore[misc]
        first = call(head, f"/{name}/pid", tokens["admin"])
        assert first.status_code == 200, (name, first.status_code, first.text)
        client.delete_service(name)


def test_a_jobs_exposed_port_is_published_to_its_owner_only(
    head: HeadProcess, client: GpupoolClient, tokens: dict[str, str]
) -> None:
    port = free_port()
    job_id = publish(head, port, tokens["max"])
    wait_state(client, job_id, ("running",), WAIT)
    shown = head.cli("show", str(job_id))
    assert f"{head.gateway_url}/jobs/{job_id}/" in shown.stdout, shown.stdout
    assert client.job(job_id)["expose"] == port
    path = f"/jobs/{job_id}/echo"
    wait_for(lambda: call(head, path, tokens["max"]).status_code == 200, WAIT, 0.2, "the job's port to be published")
    seen = call(head, path, tokens["max"]).json()
    assert seen["path"] == path and "authorization" not in seen["headers"]  # the prefix kept, the token not
    assert call(head, path, tokens["admin"]).status_code == 200
    assert call(head, path, tokens["kim"]).status_code == 403
    assert call(head, path).status_code == 401
    client.cancel(job_id)
    wait_for(lambda: call(head, path, tokens["max"]).status_code == 404, WAIT, 0.2, "the route to go with the job")


def test_replicas_and_published_ports_answer_the_gateway_only(
    head: HeadProcess, client: GpupoolClient, tokens: dict[str, str]
) -> None:
    """Issue 30: kim's job called a members-only replica straight at its host:port, with no token,
    and got 200. Now other jobs, on its node and on the other one, are refused at connect (EPERM);
    the gateway, with a member's token, still gets through; kim is not shown where it runs."""
    walls = {n["name"]: n["isolation"].get("network", "") for n in client.nodes()}
    if not all(w.startswith("cgroup connect program") for w in walls.values()):
        pytest.skip(f"the nodes cannot wall ports here: {walls}")
    serve(head, "walled", "--replicas", "1")
    routed(head, "walled", tokens["admin"])
    (replica,) = client.service("walled")["endpoints"]
    with GpupoolClient(head.url, tokens["max"]) as member, GpupoolClient(head.url, tokens["kim"]) as stranger:
        assert member.service("walled")["endpoints"] == [replica]  # max may call it: max sees where
        hidden = stranger.service("walled")
        assert hidden["endpoints"] == [] and [(r["host"], r["port"]) for r in hidden["replica_list"]] == [(None, None)]
    port = free_port()
    notebook = publish(head, port, tokens["max"])
    path = f"/jobs/{notebook}/echo"
    wait_for(lambda: call(head, path, tokens["max"]).status_code == 200, WAIT, 0.2, "the job's port to be published")
    targets = [f"{replica['host']}:{replica['port']}", f"127.0.0.1:{port}"]
    # A job of kim's with a worker on each node (two workers of four GPUs each), whichever the replica's.
    sent = head.cli(
        "submit", "--workers", "2", "--gpus", "4", "--", SYSTEM_PYTHON, DIAL, *targets, token=tokens["kim"]
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    checker = int(sent.stdout.split()[-1])
    wait_state(client, checker, ("succeeded",), WAIT)
    assert {p["node"] for p in client.job(checker)["placements"]} == set(walls)
    for worker in (0, 1):
        said = client.logs(checker, worker).data.decode()
        assert dialed(said) == {t: errno.EPERM for t in targets}, said
    assert call(head, "/walled/pid", tokens["max"]).status_code == 200  # the gateway still gets through
    assert call(head, path, tokens["max"]).status_code == 200
    client.cancel(notebook)
    client.delete_service("walled")


@pytest.mark.parametrize(("value", "says"), [("0", "expose"), ("65536", "expose"), ("x", "")])
def test_a_bad_expose_port_is_refused(head: HeadProcess, value: str, says: str) -> None:
    out = head.cli("submit", "--gpus", "0", "--expose", value, "--", "true")
    assert out.returncode == 2 and says in out.stderr, out.stderr


def test_a_gateway_port_taken_stops_a_head_in_one_line(head: HeadProcess, tmp_path: Path) -> None:
    taken = head.gateway_url.rsplit(":", 1)[1]
    args = ("up", "--port", str(free_port()), "--gateway-port", taken, "--data-dir", str(tmp_path / "other"))
    result = head.cli(*args, "--fake-nodes", "1", timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "for the gateway: the port is taken" in lines[0], result.stderr


def test_the_gateway_goes_with_its_head(head: HeadProcess) -> None:
    """Last: a head killed with SIGKILL cannot stop its gateway; the gateway stops by itself."""
    gateways = [p for p in _gateway_pids() if str(head.data_dir) in _cmdline(p)]
    assert len(gateways) == 1
    head.stop(signal.SIGKILL)
    wait_for(lambda: not pid_alive(gateways[0]), WAIT, 0.1, "the orphaned gateway to stop")


def _ready(client: GpupoolClient, name: str, count: int) -> dict[str, Any] | None:
    s = client.service(name)
    live = [r for r in s["replica_list"] if not r["stopping"]]
    return s if s["replicas"]["ready"] == count and len(live) == count and len(s["endpoints"]) == count else None


def _gateway_pids() -> list[int]:
    return [
        int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and "gpupool.gateway" in _cmdline(int(p.name))
    ]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""

"""gpupool on a real Ray cluster of three nodes on this machine (``conftest.py``): gangs across
nodes with their rendezvous, the DDP example trained across nodes, a node crash that requeues a
gang which resumes from its checkpoint, and a head restart that re-attaches to running work."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pwd
import re
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from gpupool import head_ray
from gpupool.client import ClientError, GpupoolClient
from gpupool.executors.ray_processes import ray_temp_dir
from tests.multinode.conftest import RayCluster
from tests.support import DIAL, REPLICA_SERVER
from tests.support.dial import dialed
from tests.support.elastic import EPOCHS, LAUNCH, epochs_of, wait_for_world
from tests.support.headproc import HeadProcess, pid_alive, wait_for, wait_state
from tests.support.oci import File, layer, write_archive
from tests.support.unix_accounts import TestAccounts

# Generous: the first test also pays for starting the shared Ray cluster on a slow 2-core machine.
pytestmark = [pytest.mark.e2e, pytest.mark.ray, pytest.mark.timeout(420)]

DDP = str(Path(__file__).resolve().parents[2] / "examples" / "ddp_train.py")
STEP_LINE = re.compile(r"^step (\d+) loss (\S+)$", re.MULTILINE)
ENV = {"OMP_NUM_THREADS": "1"}


def log_text(c: GpupoolClient, job_id: int, worker: int) -> str:
    return c.logs(job_id, worker).data.decode()


def submit(c: GpupoolClient, argv: list[str], **fields: Any) -> int:
    return int(c.submit(command=argv, env=ENV, workdir=str(Path.cwd()), **fields)["id"])


def events(job: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [e for e in job["events"] if e["kind"] == kind]


def test_secrets_are_private_and_a_join_token_only_joins(cluster: RayCluster) -> None:
    data = cluster.head.data_dir
    for secret in (data / "join-token", data / "ray" / "auth_token", cluster.nodes["w1"].data_dir / "ray-token"):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret
    join_token = (data / "join-token").read_text().strip()
    with GpupoolClient(cluster.head.url, join_token) as c:
        with pytest.raises(ClientError) as refused:
            c.jobs()
        assert refused.value.status == 403
        assert c.join("w9")["ray_address"]
        with pytest.raises(ClientError) as taken:
            c.join("w1")  # two live nodes may not share a name
        assert taken.value.status == 409 and "pick another --name" in taken.value.message
    with GpupoolClient(cluster.head.url, "gp_not-a-token") as c, pytest.raises(ClientError) as bad:
        c.join("w9")
    assert bad.value.status == 401
    # Ray itself refuses a caller without the cluster's token.
    address = (data / "ray" / "address").read_text().strip()
    wrong = data.parent / "wrong-token"
    wrong.write_text("0" * 64)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(wrong)}
    ray = str(Path(sys.executable).with_name("ray"))
    done = subprocess.run([ray, "status", f"--address={address}"], env=env, capture_output=True, timeout=120)
    assert done.returncode != 0
    assert b"auth" in (done.stdout + done.stderr).lower()


def test_an_image_imported_through_the_head_is_held_by_every_joined_node(cluster: RayCluster) -> None:
    """Issue 32 on Ray: each node's agent unpacks the archive from the shared path into its own
    cache and lists it; an archive no node can use is refused with a node's sentence."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as shared:
        archive = Path(shared) / "stack.tar"
        digest = write_archive(archive, [layer({"hello.txt": File(b"hi\n")})], cmd=("cat", "/hello.txt"))
        (Path(shared) / "junk.tar").write_bytes(b"junk" * 100)
        with cluster.head.client() as c:
            done = c.import_image(str(archive), "stack:ray")
            results = {n["node"]: n["result"] for n in done["nodes"]}
            assert {"w1", "w2"} <= set(results) and set(results.values()) == {"imported"}, done
            held = c.images()
            assert held["skipped"] == []
            assert sorted((i["node"], i["digest"], i["names"][0]) for i in held["images"]) == [
                (node, digest, "stack:ray") for node in sorted(results)
            ]
            with pytest.raises(ClientError) as refused:
                c.import_image(str(Path(shared) / "junk.tar"), "junk")
            assert (refused.value.status, refused.value.code) == (400, "bad_image")
            assert "junk.tar" in refused.value.message


def test_gang_runs_one_worker_per_node_with_the_rendezvous(cluster: RayCluster) -> None:
    with cluster.head.client() as c:
        job_id = submit(c, ["sh", "-c", "env | sort"], workers=2, gpus=2)
        job = wait_state(c, job_id, ("succeeded", "failed"), timeout=60)
        envs = [
            dict(line.split("=", 1) for line in log_text(c, job_id, w).splitlines()[1:] if "=" in line) for w in (0, 1)
        ]
        addresses = {n["name"]: n["address"] for n in c.nodes()}
    assert job["state"] == "succeeded"
    nodes = [envs[w]["GPUPOOL_NODE"] for w in (0, 1)]
    assert sorted(nodes) == ["w1", "w2"]
    for rank, env in enumerate(envs):
        assert env["RANK"] == env["NODE_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == env["NNODES"] == "2"
        assert env["LOCAL_RANK"] == "0"
        assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
        assert env["MASTER_ADDR"] == addresses[nodes[0]]
        assert env["MASTER_PORT"] == envs[0]["MASTER_PORT"]
        assert not [k for k in env if k.startswith("RAY_")], "Ray's variables must not leak into jobs"


def test_a_services_replicas_on_two_joined_nodes_answer_through_the_gateway(cluster: RayCluster) -> None:
    """Issue 17 on Ray: two replicas spread over the joined nodes, each reached at its node's
    address by the gateway the head started; the requests through one URL reach both."""
    import httpx

    token = cluster.head.token()
    with cluster.head.client() as c:
        body = {"name": "echo", "command": [sys.executable, REPLICA_SERVER], "replicas": 2, "gpus": 1}
        made = c.serve({**body, "env": ENV, "workdir": str(Path.cwd())})
        assert made["url"] and made["url"].endswith("/echo/")
        wait_for(lambda: c.service("echo")["replicas"]["ready"] == 2, timeout=90, interval=0.5, what="2 ready replicas")
        replicas = c.service("echo")["replica_list"]
        addresses = {n["name"]: n["address"] for n in c.nodes()}
    assert sorted(r["node"] for r in replicas) == ["w1", "w2"]
    assert all(r["host"] == addresses[r["node"]] for r in replicas)
    seen: set[str] = set()
    with httpx.Client(base_url=cluster.head.gateway_url, headers={"Authorization": f"Bearer {token}"}) as http:

        def both_answered() -> bool:
            answer = http.get("/echo/pid", timeout=10)
            if answer.status_code == 503 and "no_replica" in answer.text:
                return False  # the gateway reads the head's routes every half second: not yet
            assert answer.status_code == 200, answer.text
            seen.add(answer.text)
            return len(seen) == 2

        wait_for(both_answered, timeout=60, interval=0.05, what="requests through the gateway to reach both replicas")
    with cluster.head.client() as c:
        walls = {n["name"]: n["isolation"].get("network", "") for n in c.nodes()}
        targets = [f"{r['host']}:{r['port']}" for r in replicas]
        if all(w.startswith("cgroup connect program") for w in walls.values()):
            # Issue 30: another job reaches neither replica straight, on its node or the other one.
            dialer = submit(c, [sys.executable, DIAL, *targets], gpus=0)
            wait_state(c, dialer, ("succeeded",), 90)
            said = log_text(c, dialer, 0)
            assert dialed(said) == {t: errno.EPERM for t in targets}, said
        else:
            assert os.geteuid() != 0, walls  # as root, with cgroup v2, every node walls its ports
        c.delete_service("echo")
        wait_for(lambda: not c.services(), timeout=60, interval=0.5, what="the service to be gone")


# Prints its uid, then leaves three processes outside its process group: setsid, nohup and a double fork.
ESCAPE = (
    'echo "UID $(id -u)"; setsid sleep 300 & echo "ESCAPED $!"; '
    '(nohup sleep 301 >/dev/null 2>&1 & echo "ESCAPED $!"); sleep 300'
)


def test_on_ray_a_job_runs_as_its_owner_and_nothing_it_started_outlives_its_cancel(
    cluster: RayCluster, unix_accounts: TestAccounts
) -> None:
    if os.geteuid() != 0:
        pytest.skip("jobs run as their owners, in cgroups, only where the node runtime runs as root; this is not root")
    account = unix_accounts.make("rue")
    with cluster.head.client() as admin:
        token = str(admin.add_user("rue", unix_user=account)["token"])
    with GpupoolClient(cluster.head.url, token) as c:
        job_id = int(c.submit(command=["sh", "-c", ESCAPE], workers=2, gpus=1, env=ENV)["id"])
        wait_state(c, job_id, ("running",), timeout=60)

        def escaped() -> list[list[int]]:
            return [[int(p) for p in re.findall(r"^ESCAPED (\d+)$", log_text(c, job_id, w), re.M)] for w in (0, 1)]

        wait_for(lambda: all(len(e) == 2 for e in escaped()), timeout=30, what="both workers' escapees started")
        logs = [log_text(c, job_id, w) for w in (0, 1)]
        escapees = [p for worker in escaped() for p in worker]
        assert all(pid_alive(p) for p in escapees)
        assert {p["node"] for p in c.job(job_id)["placements"]} == {"w1", "w2"}
        c.cancel(job_id)
        assert wait_state(c, job_id, ("cancelled",), timeout=60)["run_as"] == account
    uid = pwd.getpwnam(account).pw_uid
    assert all(f"UID {uid}\n" in log for log in logs), logs
    assert not [p for p in escapees if pid_alive(p)], "a process of the cancelled job outlived it on a Ray node"


def test_ddp_example_trains_across_two_nodes(cluster: RayCluster) -> None:
    with cluster.head.client() as c:
        job_id = submit(c, [sys.executable, DDP, "--steps", "60", "--device", "cpu"], workers=2, gpus=1)
        job = wait_state(c, job_id, ("succeeded", "failed"), timeout=150)
        log = log_text(c, job_id, 0)
    assert job["state"] == "succeeded", log
    assert len({p["node"] for p in job["placements"]}) == 2
    steps = [(int(s), float(loss)) for s, loss in STEP_LINE.findall(log)]
    assert steps and steps[-1][1] < steps[0][1] / 4, steps


def test_node_crash_requeues_the_gang_which_resumes_from_its_checkpoint(cluster: RayCluster, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    # 160 steps of 0.05 s: the crash comes right after the first checkpoint (step 20), 7 s or more before the end.
    argv = [sys.executable, DDP, "--steps", "160", "--step-time", "0.05", "--log-every", "20"]
    argv += ["--checkpoint-every", "20", "--device", "cpu"]
    with cluster.head.client() as c:  # the job's checkpoint dir reaches the script as GPUPOOL_CHECKPOINT_DIR
        job_id = submit(c, argv, workers=2, gpus=1, max_restarts=1, checkpoint_dir=str(ckpt))
        job = wait_state(c, job_id, ("running",), timeout=60)
        wait_for(lambda: list(ckpt.glob("ckpt-*.pt")), timeout=90, interval=0.2, what="a first checkpoint")
        victim = next(p["node"] for p in job["placements"] if p["worker"] == 1)
        survivor = next(p["node"] for p in job["placements"] if p["worker"] == 0)
        assert victim != survivor
        crashed_at = time.monotonic()
        cluster.nodes[victim].crash()
        wait_for(lambda: cluster.nodes[victim].state() == "down", timeout=30, interval=0.2, what="the node down")
        down_after = time.monotonic() - crashed_at
        wait_for(lambda: events(c.job(job_id), "requeued"), timeout=60, what="the job requeued")
        requeued_after = time.monotonic() - crashed_at
        job = wait_state(c, job_id, ("succeeded", "failed"), timeout=180)
        resumed = log_text(c, job_id, 0)
    assert down_after < 15, f"node seen down after {down_after:.1f}s"
    assert requeued_after < 30, f"requeued after {requeued_after:.1f}s"
    assert job["state"] == "succeeded", resumed
    assert job["restarts"] == 1
    assert [e for e in events(job, "lost") if victim in e["message"]]
    # The survivor ended (DDP's collective fails when its peer vanishes, or the head stops it)
    # before the gang was requeued: the two attempts never overlap.
    ended = [e for e in events(job, "worker_exit") if survivor in e["message"]]
    assert ended and ended[0]["time"] <= events(job, "requeued")[0]["time"], job["events"]
    # Attempt 2 ran on the remaining capacity and went on from the checkpoint, not from step 0.
    assert {p["node"] for p in job["placements"]} == {survivor}
    match = re.search(r"resumed from step (\d+)", resumed)
    assert match and int(match.group(1)) >= 20, resumed
    # The crashed node fenced its own worker: it was not left running beside the requeued copy.
    run = cluster.nodes[victim].data_dir / "runs" / f"job-{job_id}" / "attempt-1" / "worker-1"
    record = json.loads(wait_for(lambda: (run / "exit.json").exists() and (run / "exit.json").read_text(), 5))
    assert record.get("fenced") is True
    # The node comes back and is used again.
    cluster.join(victim)
    with cluster.head.client() as c:
        again = submit(c, ["true"], workers=2, gpus=2)
        assert wait_state(c, again, ("succeeded", "failed"), timeout=60)["state"] == "succeeded"
        assert {p["node"] for p in c.job(again)["placements"]} == {"w1", "w2"}


def test_node_crash_stops_the_survivors_and_fails_a_job_with_no_restarts_left(cluster: RayCluster) -> None:
    with cluster.head.client() as c:
        job_id = submit(c, ["sh", "-c", "sleep 60"], workers=2, gpus=2)
        job = wait_state(c, job_id, ("running",), timeout=60)
        victim = next(p["node"] for p in job["placements"] if p["worker"] == 1)
        survivor = next(p["node"] for p in job["placements"] if p["worker"] == 0)
        cluster.nodes[victim].crash()
        job = wait_state(c, job_id, ("failed",), timeout=60)
    assert job["reason"] or job["events"]
    failed = events(job, "failed")[0]["message"]
    assert f"worker 1 on {victim} was lost" in failed and "no restarts left" in failed, failed
    stopped = [e for e in events(job, "worker_exit") if survivor in e["message"]]
    assert stopped and "143" in stopped[0]["message"], job["events"]  # stopped by the head (SIGTERM)
    cluster.join(victim)


def test_a_frozen_node_is_declared_down_and_its_worker_fences_itself(cluster: RayCluster) -> None:
    with cluster.head.client() as c:
        job_id = submit(c, ["sh", "-c", "sleep 120"], workers=2, gpus=2, max_restarts=1)
        job = wait_state(c, job_id, ("running",), timeout=60)
        victim = next(p["node"] for p in job["placements"] if p["worker"] == 1)
        run = cluster.nodes[victim].data_dir / "runs" / f"job-{job_id}" / "attempt-1" / "worker-1"
        frozen_at = time.monotonic()
        cluster.nodes[victim].freeze()
        try:
            wait_for(lambda: cluster.nodes[victim].state() == "down", timeout=30, interval=0.2, what="node down")
            down_after = time.monotonic() - frozen_at
            wait_for(lambda: events(c.job(job_id), "requeued"), timeout=60, what="the job requeued")
            # By the time the head requeued the gang, the frozen node's worker had stopped itself.
            record = json.loads((run / "exit.json").read_text())
            assert record.get("fenced") is True
        finally:
            cluster.nodes[victim].thaw()
        c.cancel(job_id)
    assert down_after < 15, f"a frozen node was seen down after {down_after:.1f}s"
    # Ray tells the thawed node it was declared dead; it leaves, and comes back as a new node.
    node = cluster.nodes[victim]
    assert node.proc is not None
    node.proc.wait(timeout=60)
    node.proc = None
    cluster.join(victim)


def test_a_restarted_head_reattaches_to_running_work(cluster: RayCluster, tmp_path: Path) -> None:
    # The workers run until the test says so (a file appears), not for a fixed time: past the
    # restart, however long it takes here, and no longer (at most 2 minutes).
    go = tmp_path / "go"
    script = f"echo started; for i in $(seq 1200); do [ -e {go} ] && break; sleep 0.1; done; echo done"
    with cluster.head.client() as c:
        job_id = submit(c, ["sh", "-c", script], workers=2, gpus=1)
        wait_state(c, job_id, ("running",), timeout=60)
    cluster.head.stop(sig=9)
    cluster.head.start(timeout=120)
    with cluster.head.client() as c:
        assert c.job(job_id)["state"] == "running"
        go.touch()
        job = wait_state(c, job_id, ("succeeded", "failed"), timeout=60)
        logs = [log_text(c, job_id, w) for w in (0, 1)]
    assert job["state"] == "succeeded", logs
    assert events(job, "readopted")
    assert all("done" in log for log in logs)


def _ray_processes(data_dir: Path) -> set[int]:
    """Processes of the Ray session a head on ``data_dir`` started (its temp dir in their command line)."""
    marker = str(ray_temp_dir(data_dir / "ray")).encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker in (entry / "cmdline").read_bytes() and pid_alive(int(entry.name)):
                    found.add(int(entry.name))
    return found


def test_the_ray_head_a_head_started_stays_for_its_jobs_and_down_stops_it(cluster: RayCluster) -> None:
    """Issue 15, part 9: nothing gpupool starts outlives it unless jobs need it, and then `gpupool
    down` stops it; the shared cluster of this module (another Ray on the machine) is untouched."""
    head = HeadProcess(Path(tempfile.mkdtemp(prefix="gp-r9-")) / "data", nodes=None, gpus=1, extra=["--backend", "ray"])
    try:
        head.start(timeout=120)
        assert _ray_processes(head.data_dir), "the head started no Ray processes of its own"
        wall = ray_temp_dir(head.data_dir / "ray").parent  # jobs run as other accounts: Ray's files are the head's
        assert wall.parent == Path(tempfile.gettempdir()) and stat.S_IMODE(wall.stat().st_mode) == 0o700
        assert os.access(wall / "ray", os.F_OK)  # Ray's own (0777, its choice) lives inside it
        with head.client() as c:
            job_id = int(c.submit(command=["sleep", "300"], gpus=1)["id"])
            wait_state(c, job_id, ("running",), timeout=60)
        code, out = head.stop(timeout=90)
        assert code == 0 and "keeps running for 1 running worker(s)" in out and "gpupool down --data-dir" in out, out
        assert _ray_processes(head.data_dir)  # kept for the job
        done = head.cli("down", "--data-dir", str(head.data_dir))
        assert done.returncode == 0, done.stderr
        assert "no head was running; 1 worker(s) stopped; the Ray head it started stopped" in done.stdout, done.stdout
        wait_for(lambda: not _ray_processes(head.data_dir), timeout=30, what="Ray to end after gpupool down")
        with cluster.head.client() as c:  # the module's own Ray cluster, another Ray here, is untouched
            assert c.health()["status"] == "ok" and c.nodes()
    finally:
        head.kill_everything()


def test_with_no_job_on_it_the_ray_head_is_stopped_with_the_gpupool_head(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The other branch of ``after_head`` (a real stop of a real Ray session is the test above's
    `gpupool down`, which runs the same ``stop_started``)."""
    stopped: list[Path] = []
    monkeypatch.setattr(head_ray, "stop_started", lambda ray_dir: stopped.append(ray_dir) or 7)
    assert head_ray.after_head(tmp_path / "ray", 0) == "stopped the Ray head this head started (7 processes)"
    assert stopped == [tmp_path / "ray"]
    kept = head_ray.after_head(tmp_path / "ray", 2)
    assert "keeps running for 2 running worker(s)" in kept and f"gpupool down --data-dir {tmp_path}" in kept
    assert stopped == [tmp_path / "ray"]


def test_on_ray_a_gang_runs_in_an_image_on_two_nodes(cluster: RayCluster, unix_accounts: TestAccounts) -> None:
    """Issue 32: the Ray node runtime gets the image from its own cache and starts the worker in it,
    as the local one does; the job's JSON says the digest it ran."""
    if os.geteuid() != 0:
        pytest.skip("jobs in images need the node runtime to run as root; this is not root")
    from tests.support.images import image_place, python_image

    with image_place("ray-image") as place:  # not /tmp: a worker's /tmp is its own
        ref = python_image(place)
        account = unix_accounts.make("ivy")
        with cluster.head.client() as admin:
            token = str(admin.add_user("ivy", unix_user=account)["token"])
        script = "echo RANK=$RANK; echo VAR=$IMAGE_VAR; echo WHO=$(id -un)"
        with GpupoolClient(cluster.head.url, token) as c:
            job_id = int(c.submit(command=["sh", "-c", script], workers=2, gpus=1, env=ENV, image=ref)["id"])
            job = wait_state(c, job_id, ("succeeded", "failed"), timeout=120)
            logs = [log_text(c, job_id, w) for w in (0, 1)]
        assert job["state"] == "succeeded", "\n".join([*logs, *(e["message"] for e in job["events"])])
        assert job["image"] == ref and str(job["image_digest"]).startswith("sha256:"), job
        assert {p["node"] for p in job["placements"]} == {"w1", "w2"}
        for worker, log in enumerate(logs):
            assert f"RANK={worker}" in log and "VAR=from-image" in log and f"WHO={account}" in log, log


def test_on_ray_an_elastic_job_grows_onto_a_second_node_and_shrinks_back(cluster: RayCluster, tmp_path: Path) -> None:
    """Issue 35 across two Ray nodes: the elastic example starts on one node beside a job holding
    the other, grows onto it when that job ends, and gives its extra worker to an interactive job
    of its project, training on through both re-forms."""
    with cluster.head.client() as c:
        blocker = submit(c, ["sleep", "600"], gpus=2)
        wait_state(c, blocker, ("running",), timeout=60)
        job = submit(c, ["bash", "-c", LAUNCH], gpus=2, workers="1:2", checkpoint_dir=str(tmp_path / "ckpt"))
        wait_state(c, job, ("running",), timeout=60)
        wait_for_world(c, job, 1, workers=2)
        c.cancel(blocker)
        wait_for_world(c, job, 2, workers=2)
        nodes = {p["node"] for p in c.job(job)["placements"]}
        urgent = submit(c, ["sleep", "600"], gpus=2, priority="interactive")
        wait_state(c, urgent, ("running",), timeout=60)
        done = wait_state(c, job, ("succeeded", "failed"), timeout=240)
        c.cancel(urgent)
        shown = c.job(job)
        epochs = epochs_of(c, job, 2)
    said = [f"{e['kind']}: {e['message']}" for e in shown["events"]]
    assert done["state"] == "succeeded", (epochs, said)
    assert nodes == {"w1", "w2"}, "it grew onto the other node"
    assert any(m.startswith("grew: grew to 2 workers") for m in said), said
    assert any(m.startswith("shrank: shrank to 1 worker: GPUs for job") for m in said), said
    assert [e for e, _, _ in epochs] == list(range(1, EPOCHS + 1)), epochs
    worlds = [w for i, (_, w, _) in enumerate(epochs) if i == 0 or epochs[i - 1][1] != w]
    assert worlds == [1, 2, 1], epochs
    assert epochs[-1][2] < epochs[0][2] / 20, epochs

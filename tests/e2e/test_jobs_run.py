"""Jobs run as real processes on the GPUs they were given, with the environment DESIGN §5 names."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpupool.node.walls import NodeWalls, confinement
from tests.support.headproc import HeadProcess, pid_alive, wait_for, wait_state

pytestmark = pytest.mark.e2e

DUMP_ENV = textwrap.dedent("""
    import json, os, sys, time
    keys = ["CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "NNODES",
            "NODE_RANK", "GPUS_PER_NODE", "GPUPOOL_JOB_ID", "GPUPOOL_NODE", "GPUPOOL_RESTARTS", "OMP_NUM_THREADS",
            "MY_VAR"]
    out = {k: os.environ.get(k) for k in keys}
    out["cwd"] = os.getcwd()
    out["affinity"] = sorted(os.sched_getaffinity(0))
    with open(os.path.join(sys.argv[1], f"job{os.environ['GPUPOOL_JOB_ID']}-w{os.environ['RANK']}.json"), "w") as f:
        json.dump(out, f)
    time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)
""")


def dump(tmp_path: Path) -> Path:
    script = tmp_path / "dump_env.py"
    script.write_text(DUMP_ENV)
    return script


def read(tmp_path: Path, job: int, worker: int = 0) -> dict[str, object]:
    return dict(json.loads((tmp_path / f"job{job}-w{worker}.json").read_text()))


def test_each_worker_sees_exactly_its_gpus_and_concurrent_jobs_never_share(head: HeadProcess, tmp_path: Path) -> None:
    script = dump(tmp_path)
    with head.client() as c:
        ids = [c.submit(command=[sys.executable, str(script), str(tmp_path), "3"], gpus=g)["id"] for g in (2, 2, 3, 1)]
        jobs = [wait_state(c, i, ("succeeded",), timeout=30) for i in ids]
    seen: set[tuple[str, int]] = set()
    for job in jobs:
        env = read(tmp_path, job["id"])
        (placement,) = job["placements"]
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, placement["gpus"]))
        assert len(placement["gpus"]) == job["gpus"]
        assert env["GPUPOOL_NODE"] == placement["node"]
        mine = {(placement["node"], g) for g in placement["gpus"]}
        assert not (mine & seen), f"GPU shared between concurrent jobs: {mine & seen}"
        seen |= mine
    assert len(seen) == 8  # 2+2+3+1 on a 2x4 cluster
    assert max(j["started_at"] for j in jobs) < min(j["finished_at"] for j in jobs), "the jobs did not overlap"


def test_third_four_gpu_job_waits_with_a_reason_and_starts_when_one_ends(head: HeadProcess, tmp_path: Path) -> None:
    marker = tmp_path / "release"
    hold = [sys.executable, "-c", f"import os,time\nwhile not os.path.exists({str(marker)!r}): time.sleep(0.05)"]
    with head.client() as c:
        first = c.submit(command=hold, gpus=4)["id"]
        second = c.submit(command=["sleep", "30"], gpus=4)["id"]
        third = c.submit(command=["true"], gpus=4)["id"]
        wait_state(c, first, ("running",))
        wait_state(c, second, ("running",))
        pending = wait_state(c, third, ("pending",))
        # The reason is written at the end of the cycle that saw the job, after that cycle's launches.
        why = wait_for(lambda: (w := c.why(third))["reason_code"] != "new" and w, what="a reason for job 3")
        assert why["reason_code"] == "resources", why
        assert "needs 4 GPUs" in why["reason"] and "0 of 8 GPUs are free" in why["reason"]
        assert pending["placements"] == []
        marker.write_text("go")
        done = wait_state(c, third, ("succeeded",), timeout=30)
        assert done["placements"][0]["node"] == c.job(first)["placements"][0]["node"]
        c.cancel(second)


def test_two_worker_gang_gets_rank_world_size_and_a_working_rendezvous(head: HeadProcess, tmp_path: Path) -> None:
    script = tmp_path / "rendezvous.py"
    script.write_text(
        textwrap.dedent(f"""
        import json, os, socket, time
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        if rank == 0:
            srv = socket.create_server((addr, port))
            conn, _ = srv.accept()
            peer = conn.recv(100).decode()
        else:
            for _ in range(200):
                try:
                    conn = socket.create_connection((addr, port)); break
                except OSError:
                    time.sleep(0.05)
            conn.sendall(f"hello from {{rank}}/{{world}}".encode())
            peer = "sent"
        with open({str(tmp_path)!r} + f"/rank{{rank}}.json", "w") as f:
            json.dump({{"peer": peer, "cvd": os.environ["CUDA_VISIBLE_DEVICES"], **{{k: os.environ[k] for k in
                       ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK", "GPUS_PER_NODE"]}}}}, f)
    """)
    )
    with head.client() as c:
        job = c.submit(command=[sys.executable, str(script)], gpus=4, workers=2)
        done = wait_state(c, job["id"], ("succeeded", "failed"), timeout=30)
    assert done["state"] == "succeeded", done
    r0 = json.loads((tmp_path / "rank0.json").read_text())
    r1 = json.loads((tmp_path / "rank1.json").read_text())
    assert (r0["RANK"], r1["RANK"]) == ("0", "1")
    assert r0["WORLD_SIZE"] == r1["WORLD_SIZE"] == "2"
    assert r0["MASTER_ADDR"] == r1["MASTER_ADDR"] == "127.0.0.1"
    assert r0["MASTER_PORT"] == r1["MASTER_PORT"]
    assert (r0["NNODES"], r0["NODE_RANK"], r1["NODE_RANK"], r1["GPUS_PER_NODE"]) == ("2", "0", "1", "4")
    assert r0["peer"] == "hello from 1/2"
    nodes = {p["node"] for p in done["placements"]}
    assert nodes == {"node-1", "node-2"}
    assert r0["cvd"] == r1["cvd"] == "0,1,2,3"


def test_cpus_pin_affinity_and_threads_env_and_workdir_is_used(head: HeadProcess, tmp_path: Path) -> None:
    script = dump(tmp_path)
    workdir = tmp_path / "wd"
    workdir.mkdir()
    with head.client() as c:
        job = c.submit(
            command=[sys.executable, str(script), str(tmp_path)],
            gpus=0,
            cpus=1,
            workdir=str(workdir),
            env={"MY_VAR": "hello"},
        )
        wait_state(c, job["id"], ("succeeded",))
    env = read(tmp_path, job["id"])
    assert env["OMP_NUM_THREADS"] == "1"
    assert len(env["affinity"]) == 1  # type: ignore[arg-type]
    assert env["cwd"] == str(workdir)
    assert env["MY_VAR"] == "hello"
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_a_fraction_of_a_core_shares_the_unpinned_cores_under_a_quota(head: HeadProcess) -> None:
    """``--cpus 0.25`` from the CLI: 250 millicores exactly, the node's unpinned cores, one thread,
    and where the node has the cpu controller, a quarter of a core: a busy loop of 1.5 s gets
    about 0.4 s of CPU time."""
    spin = "import os, time\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end: pass\n"
    spin += "print('cpu', time.process_time(), os.environ['OMP_NUM_THREADS'], sorted(os.sched_getaffinity(0)))"
    job_id = head.cli("submit", "--gpus", "0", "--cpus", "0.25", "--", sys.executable, "-c", spin).stdout.split()[-1]
    with head.client() as c:
        job = wait_state(c, int(job_id), ("succeeded",), timeout=30)
        (line,) = [x for x in c.logs(int(job_id)).data.decode().splitlines() if x.startswith("cpu ")]
    assert (job["cpus"], job["cpu_milli"], job["placements"][0]["cpu_milli"]) == (0.25, 250, 250)
    _, used, threads, cores = line.split(" ", 3)
    assert threads == "1" and json.loads(cores) == job["placements"][0]["cpus"] != []
    layout = confinement()
    if layout is not None and layout.mechanism("cpu quota") != "none":
        assert float(used) < 0.8, line
    assert "1 worker(s) × 0 GPU, 0.25 CPUs" in head.cli("show", job_id).stdout


def test_memory_limit_stops_a_worker_that_allocates_beyond_it(head: HeadProcess) -> None:
    hog = [sys.executable, "-c", "x = bytearray(600 * 1024 * 1024); print('allocated')"]
    with head.client() as c:
        limited = c.submit(command=hog, gpus=0, memory="200M")["id"]
        free = c.submit(command=hog, gpus=0, memory="2G")["id"]
        assert wait_state(c, limited, ("succeeded", "failed"))["state"] == "failed"
        assert wait_state(c, free, ("succeeded", "failed"))["state"] == "succeeded"
        log = c.logs(limited).data
        if confinement() is None:  # per-process limit only: the allocation fails inside the job
            assert b"MemoryError" in log, log
        else:  # the worker's cgroup: the kernel kills it, and the node says why
            assert b"the worker ran out of memory: its limit is 200 MiB" in log, log
            job = c.job(limited)
            assert (job["exit_code"], job["exit_reason"]) == (137, "oom")
            assert c.job(free)["exit_reason"] is None
            assert "oom" in [e["kind"] for e in job["events"]]
            shown = head.cli("show", str(limited))
            assert "137 (out of memory: its --memory limit)" in shown.stdout, shown
            metrics = httpx.get(f"{head.url}/metrics", headers={"Authorization": f"Bearer {head.token()}"}).text
            assert 'gpupool_worker_kills_total{project="default",reason="oom"} 1.0' in metrics


def test_show_top_and_metrics_say_what_each_worker_uses_from_its_cgroup(head_factory: type[HeadProcess]) -> None:
    """A worker holding ~150 MiB and spinning one core reads so in ``show``, ``top`` and /metrics."""
    if confinement() is None:
        pytest.skip("workers get no cgroup here (not root, or no cgroup fs): nothing measures them")
    head = head_factory(extra=["--telemetry-every", "1s"]).start()
    busy = "x = bytearray(150 * 2**20); print('holding', flush=True)\nwhile True: x[0] = (x[0] + 1) % 256"
    with head.client() as c:
        job_id = c.submit(command=[sys.executable, "-c", busy], gpus=1, memory="1G", cpus=1)["id"]
        wait_state(c, job_id, ("running",))

        def measured() -> dict[str, Any] | None:
            usage = c.job(job_id)["usage"]
            return usage[0] if usage and usage[0]["cpu_pct"] is not None else None

        usage = wait_for(measured, timeout=30, what="two cgroup readings of the worker")
        assert usage["worker"] == 0
        assert 150 <= usage["memory_mib"] <= 1024 and usage["memory_peak_mib"] >= usage["memory_mib"], usage
        assert 40 <= usage["cpu_pct"] <= 110, usage  # one core, spinning (a slow machine shares it)
        shown = head.cli("show", str(job_id)).stdout
        assert "worker 0: memory " in shown and " of 1024 MiB (peak " in shown, shown
        top = json.loads(head.cli("top", "--once", "-o", "json").stdout)
        (holder,) = [j for n in top["nodes"] for g in n["gpus"] for j in g["jobs"] if j["id"] == job_id]
        assert holder["memory_mib"] >= 150 and holder["cpu_pct"] is not None
        metrics = httpx.get(f"{head.url}/metrics", headers={"Authorization": f"Bearer {head.token()}"}).text
        node = c.job(job_id)["placements"][0]["node"]
        labels = f'job="{job_id}",node="{node}",project="default",user="admin",worker="0"'
        assert f"gpupool_worker_memory_bytes{{{labels}}}" in metrics, metrics
        assert f"gpupool_worker_cpu_percent{{{labels}}}" in metrics
        c.cancel(job_id)


def test_nothing_a_job_started_outlives_its_cancel(head: HeadProcess, tmp_path: Path) -> None:
    """setsid, nohup and a double fork leave the worker's process group; its cgroup holds them."""
    if confinement() is None:
        pytest.skip("workers get no cgroup here (not root, or no cgroup fs): a new session escapes a cancel")
    pids = tmp_path / "pids"
    script = (
        "import os, subprocess, time\n"
        f"p = subprocess.Popen(['setsid', 'sleep', '300']); open('{pids}', 'a').write(f'{{p.pid}}\\n')\n"
        "if os.fork() == 0:\n"
        "    if os.fork() == 0:\n"
        f"        open('{pids}', 'a').write(f'{{os.getpid()}}\\n'); time.sleep(300)\n"
        "    os._exit(0)\n"
        "time.sleep(300)\n"
    )
    with head.client() as c:
        job = c.submit(command=[sys.executable, "-c", script], gpus=1)["id"]
        wait_state(c, job, ("running",))
        wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, what="both escapees started")
        escapees = [int(p) for p in pids.read_text().split()]
        assert all(pid_alive(p) for p in escapees)
        c.cancel(job)
        assert wait_state(c, job, ("cancelled",))["state"] == "cancelled"
        assert not any(pid_alive(p) for p in escapees), "a process of the cancelled job is still running"


def test_failed_job_is_requeued_while_restarts_remain_and_sees_its_restart_count(head: HeadProcess) -> None:
    flaky = [
        sys.executable,
        "-c",
        "import os,sys; print('attempt', os.environ['GPUPOOL_RESTARTS']); "
        "sys.exit(0 if os.environ['GPUPOOL_RESTARTS'] == '2' else 3)",
    ]
    with head.client() as c:
        retried = c.submit(command=flaky, gpus=1, max_restarts=2)["id"]
        once = c.submit(command=flaky, gpus=1, max_restarts=1)["id"]
        ok = wait_state(c, retried, ("succeeded", "failed"), timeout=30)
        bad = wait_state(c, once, ("succeeded", "failed"), timeout=30)
        log = c.logs(retried).data.decode()
    assert ok["state"] == "succeeded" and ok["restarts"] == 2 and ok["starts"] == 3
    assert bad["state"] == "failed" and bad["exit_code"] == 3 and bad["restarts"] == 1
    assert "attempt 0" in log and "attempt 1" in log and "attempt 2" in log


def test_a_failing_worker_stops_the_rest_of_its_gang(head: HeadProcess) -> None:
    code = "import os,sys,time\nif os.environ['RANK']=='1': sys.exit(5)\ntime.sleep(60)"
    with head.client() as c:
        job = c.submit(command=[sys.executable, "-c", code], gpus=1, workers=2)["id"]
        done = wait_state(c, job, ("failed",), timeout=20)
        events = [e["kind"] for e in c.job(job)["events"]]
    assert done["exit_code"] == 5
    assert events.count("worker_exit") == 2


def test_missing_command_and_missing_workdir_fail_with_shell_exit_codes(head: HeadProcess, tmp_path: Path) -> None:
    with head.client() as c:
        nope = c.submit(command=["no-such-program-xyz"], gpus=0)["id"]
        nowd = c.submit(command=["true"], gpus=0, workdir=str(tmp_path / "absent"))["id"]
        assert wait_state(c, nope, ("failed",))["exit_code"] == 127
        assert wait_state(c, nowd, ("failed",))["exit_code"] == 126
        assert b"command not found: no-such-program-xyz" in c.logs(nope).data


def test_nodes_say_which_walls_they_enforce(head: HeadProcess) -> None:
    """``isolation`` tells the truth of this machine: cgroup mechanisms where workers get a group,
    the weaker per-process limits (and how a job gets past them) where not."""
    listing = json.loads(head.cli("nodes", "-o", "json").stdout)
    layout = confinement()
    walls = NodeWalls(layout, "any")
    expected = walls.isolation()
    walls.close()
    reported = [n["isolation"] for n in listing]
    # The walls are NodeWalls'; beside them each node says whether it runs jobs in images (issue 32).
    assert [{k: v for k, v in r.items() if k != "images"} for r in reported] == [expected, expected]
    assert all(r["images"].startswith("OCI" if os.geteuid() == 0 else "none") for r in reported), reported
    assert set(expected) == {"users", "memory", "cpus", "cpu quota", "devices", "kill", "tmp", "proc", "network"}
    if layout is not None:
        assert expected["memory"].startswith("cgroup") and expected["kill"].startswith("cgroup")
        assert "device program" in expected["devices"] or "v1 devices" in expected["devices"]
    if os.geteuid() == 0:  # a job's own /tmp, /dev/shm and /proc need root; said either way
        assert expected["tmp"].startswith("private /tmp and /dev/shm"), expected
        assert expected["network"].startswith("cgroup connect program") == (
            layout is not None and layout.unified is not None
        )
    else:
        assert expected["tmp"].startswith("none (shared /tmp and /dev/shm: not root"), expected
    table = head.cli("nodes").stdout
    flat = table.replace("\n", " ")
    assert f"walls on node-1, node-2: users {expected['users']}; memory {expected['memory']}" in flat
    assert f"; network {expected['network']}" in " ".join(flat.split())  # every wall is said, the last too

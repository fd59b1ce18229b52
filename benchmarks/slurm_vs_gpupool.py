"""Slurm and gpupool side by side: the same workloads on both, in one run, on this machine.

Starts a Slurm cluster (``slurm/cluster.py``: Debian's slurm-wlm, munge, slurmctld and two
``slurmd -N`` of 16 CPUs and 4 stand-in GPUs each) and a gpupool head (``_head.py``:
``--fake-nodes 2 --fake-gpus 4``), then runs each workload on Slurm (sbatch/squeue/scancel), on
gpupool through its CLI (a ``gpupool submit`` process per job, as a script would) and on gpupool
through its API (httpx, one keep-alive connection per client), one system after the other. Every
job takes 1 GPU. Jobs stamp their own start (``date +%s.%N > FILE``), so "running" means the same
thing on both: the job's first command ran.

* latency: submit one job, wait until it has stamped, submit the next; submit -> stamp, p50.
* back to back: N trivial jobs submitted one after another by one client; N / (last stamp - first
  submission).
* while full: 8 long jobs take every GPU, then C clients submit jobs that can only queue;
  submissions/s. The queued jobs and the long ones are then cancelled.
* array (if ``--array`` > 0): on the full cluster, ``--arrays`` arrays of that many jobs, one at
  a time (``sbatch --array``, ``gpupool submit --array``, ``POST /api/v1/arrays``); the median
  time until one is accepted. A gpupool build without arrays shows "n/a".

It prints one table (markdown) with a ratio column, gpupool's best over Slurm's, and the details
beside it. Everything it started is stopped on the way out, Ctrl-C included.

    python benchmarks/slurm_vs_gpupool.py [--jobs 200] [--skip-install] [--json FILE]

``--systems`` and ``--workloads`` narrow a run to some of them (``--systems api --workloads
back_to_back`` times gpupool's end-to-end rate alone, without installing or starting Slurm); the
ratio column then shows "—" where Slurm was not run. The head's own CPU time (its process and its
threads, from ``/proc``) over the back-to-back row is reported per job.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
from _burst import burst
from _head import RunningHead, gpupool_command, machine, machine_line, percentile, running_head, summary_ms
from slurm.cluster import SlurmCluster, SlurmLayout, parse_job_id, running_slurm
from submit_throughput import post_job

NODES, GPUS_PER_NODE = 2, 4
NOT_SUPPORTED = "n/a (not supported by this build)"
SYSTEMS = ("slurm", "cli", "api")
WORKLOADS = ("latency", "back_to_back", "full")

Submit = Callable[[str], str]  # a shell command -> the new job's id


class System(Protocol):
    label: str

    def submitter(self) -> Submit:
        """A submit function for one client thread (its own connection where there is one)."""
        ...

    def cancel_all(self) -> None: ...

    def submit_array(self, size: int, command: str) -> float | str:
        """Seconds until an array of ``size`` jobs was accepted, or why it could not be measured."""
        ...


@dataclass(frozen=True)
class Row:
    key: str
    figure: str
    unit: str
    better: str  # "lower" or "higher"


def stamp_command(path: Path) -> str:
    return f"date +%s.%N > {shlex.quote(str(path))}"


def fmt_value(value: float | None, unit: str = "") -> str:
    """927 ms, 89 ms, 7.9 jobs/s, 0.97 jobs/s, 103: three digits at most, none wasted."""
    if value is None:
        return "—"
    text = f"{value:.0f}" if abs(value) >= 100 else f"{value:.2g}"
    return f"{text} {unit}".strip()


def best_ratio(slurm: float | None, gpupool: Sequence[float | None], better: str) -> float | None:
    """gpupool's best figure over Slurm's (best: the lowest latency, the highest rate)."""
    known = [v for v in gpupool if v is not None]
    if slurm is None or not slurm or not known:
        return None
    return (min(known) if better == "lower" else max(known)) / slurm


# --- the three systems -------------------------------------------------------------------------


class SlurmSystem:
    def __init__(self, cluster: SlurmCluster, workdir: Path) -> None:
        self.cluster, self.workdir = cluster, workdir
        version = cluster.run("sinfo", "-V").split()
        self.label = f"Slurm {version[-1]}" if version else "Slurm"

    def _sbatch(self, *args: str) -> str:
        common = ["sbatch", "--parsable", "--gres=gpu:1", "-J", "bench", "-o", "/dev/null", f"--chdir={self.workdir}"]
        return parse_job_id(self.cluster.run(*common, *args))

    def submitter(self) -> Submit:
        return lambda command: self._sbatch("--wrap", command)

    def cancel_all(self) -> None:
        self.cluster.cancel_all()

    def submit_array(self, size: int, command: str) -> float:
        t0 = time.perf_counter()
        self._sbatch(f"--array=0-{size - 1}", "--wrap", command)
        return time.perf_counter() - t0


class GpupoolCli:
    label = "gpupool via its CLI"

    def __init__(self, head: RunningHead, workdir: Path) -> None:
        self.head, self.workdir = head, workdir
        self.env = {**os.environ, "GPUPOOL_URL": head.url, "GPUPOOL_TOKEN": head.token}

    def _gpupool(self, *args: str) -> str:
        done = subprocess.run(
            [*gpupool_command(), *args], env=self.env, cwd=self.workdir, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"gpupool {args[0]} exited {done.returncode}: {done.stderr.strip()[-300:]}")
        return done.stdout

    def submitter(self) -> Submit:
        def submit(command: str) -> str:
            out = self._gpupool("submit", "--gpus", "1", "--name", "bench", "--", "sh", "-c", command)
            return out.strip().splitlines()[-1]  # "prints its id as the last line"

        return submit

    def cancel_all(self) -> None:
        cancel_all_jobs(self.head)

    @functools.cached_property
    def has_array(self) -> bool:
        return "--array" in self._gpupool("submit", "--help")

    def submit_array(self, size: int, command: str) -> float | str:
        if not self.has_array:
            return NOT_SUPPORTED
        t0 = time.perf_counter()
        self._gpupool("submit", "--array", f"0-{size - 1}", "--gpus", "1", "--name", "bench", "--", "sh", "-c", command)
        return time.perf_counter() - t0


class GpupoolApi:
    label = "gpupool via its API"

    def __init__(self, head: RunningHead, workdir: Path) -> None:
        self.head, self.workdir = head, workdir
        self.clients: list[httpx.Client] = []

    def client(self) -> httpx.Client:
        http = httpx.Client(base_url=self.head.url, headers={"Authorization": f"Bearer {self.head.token}"}, timeout=60)
        self.clients.append(http)
        http.get("/api/v1/whoami").raise_for_status()  # connect and authenticate before any clock starts
        return http

    def submitter(self) -> Submit:
        http = self.client()
        return lambda command: post_job(http, job_body(command, self.workdir))

    def cancel_all(self) -> None:
        cancel_all_jobs(self.head)

    def submit_array(self, size: int, command: str) -> float | str:
        # POST /arrays, as sbatch --array: one request, accepted as one record (issue 36). A build
        # without arrays answers 404 (or 405): then this reports n/a.
        http = self.client()
        t0 = time.perf_counter()
        response = http.post("/api/v1/arrays", json={**job_body(command, self.workdir), "array": f"0-{size - 1}"})
        elapsed = time.perf_counter() - t0
        if response.status_code in (404, 405):
            return NOT_SUPPORTED
        if response.status_code >= 300:
            return f"n/a (HTTP {response.status_code}: {response.text[:80]})"
        return elapsed

    def close(self) -> None:
        for http in self.clients:
            http.close()


def job_body(command: str, workdir: Path) -> dict[str, Any]:
    """The job the CLI submits from ``workdir``: a job sees the host's ``/tmp`` only below its
    working directory (its own ``/tmp`` is private), and the stamps are written there."""
    return {"command": ["sh", "-c", command], "gpus": 1, "name": "bench", "workdir": str(workdir)}


def cancel_all_jobs(head: RunningHead, timeout: float = 60.0) -> None:
    """Cancel every job the head lists as not finished, until it lists none."""
    deadline = time.monotonic() + timeout
    asked: set[int] = set()
    with httpx.Client(base_url=head.url, headers={"Authorization": f"Bearer {head.token}"}, timeout=60) as http:
        while True:
            jobs = http.get("/api/v1/jobs", params={"limit": 1000}).raise_for_status().json()
            if not jobs:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(jobs)} gpupool jobs still listed {timeout:g} s after cancelling")
            for job in jobs:
                if job["id"] not in asked:  # a running one stays listed until its process is gone
                    http.post(f"/api/v1/jobs/{job['id']}/cancel")  # one that ended meanwhile answers an error
                    asked.add(job["id"])
            time.sleep(0.2)


# --- the workloads -----------------------------------------------------------------------------


def wait_stamps(paths: Sequence[Path], timeout: float) -> list[float]:
    """The start times the jobs wrote, waiting for every file to hold one."""
    stamps: dict[Path, float] = {}
    deadline = time.monotonic() + timeout
    while len(stamps) < len(paths):
        for path in paths:
            if path not in stamps:
                with contextlib.suppress(OSError, ValueError):
                    stamps[path] = float(path.read_text())
        if len(stamps) < len(paths):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{len(paths) - len(stamps)} of {len(paths)} jobs had not started after {timeout:g} s"
                )
            time.sleep(0.005)
    return [stamps[p] for p in paths]


def latency(system: System, stamps: Path, jobs: int, warmup: int, timeout: float) -> dict[str, Any]:
    submit = system.submitter()
    values = []
    for i in range(warmup + jobs):
        path = stamps / f"latency-{i}"
        t0 = time.time()
        submit(stamp_command(path))
        values.append(wait_stamps([path], timeout)[0] - t0)
    kept = values[warmup:]
    return {"value": percentile(kept, 50) * 1000, "ms": summary_ms(kept)}


def back_to_back(system: System, stamps: Path, jobs: int, timeout: float) -> dict[str, Any]:
    submit = system.submitter()
    paths = [stamps / f"b2b-{i}" for i in range(jobs)]
    t0 = time.time()
    for path in paths:
        submit(stamp_command(path))
    submitted = time.time() - t0
    last = max(wait_stamps(paths, timeout))
    return {"value": jobs / (last - t0), "jobs": jobs, "submitting_s": round(submitted, 2), "end_to_end_s": last - t0}


def arrays_into(system: System, size: int, count: int) -> dict[str, Any]:
    """``count`` arrays of ``size`` jobs, one at a time with a pause between (each system's work
    after an array, Slurm's or gpupool's, has time to settle): the median time until accepted."""
    taken: list[float] = []
    for i in range(count):
        if i:
            time.sleep(1.0)
        one = system.submit_array(size, "true")
        if not isinstance(one, float):
            return {"value": None, "text": one}
        taken.append(one * 1000)
    return {"value": statistics.median(taken), "size": size, "arrays_ms": [round(t, 1) for t in taken]}


def while_full(
    system: System,
    stamps: Path,
    clients: int,
    jobs: int,
    max_s: float,
    array: int,
    timeout: float,
    arrays: int = 5,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Fill every GPU with a long job, time ``jobs`` submissions from ``clients`` threads (and
    ``arrays`` arrays of ``array`` jobs, if asked), then cancel everything."""
    submit = system.submitter()
    fill = [stamps / f"fill-{clients}-{i}" for i in range(NODES * GPUS_PER_NODE)]
    try:
        for path in fill:
            submit(f"{stamp_command(path)}; exec sleep 3600")
        wait_stamps(fill, timeout)
        submitters = [system.submitter() for _ in range(clients)]
        result = burst([functools.partial(s, "true") for s in submitters], jobs, max_s)
        if result.errors:
            raise RuntimeError(f"{len(result.errors)} submissions failed, first: {result.errors[0]}")
        full = {
            "value": result.per_s,
            "clients": clients,
            "submissions": len(result.done),
            "capped": len(result.done) < jobs,
            "wall_s": round(result.wall_s, 2),
            "latency_ms": summary_ms([lat for _, lat in result.done]),
        }
        arr = None
        if array:
            arr = arrays_into(system, array, arrays)
        return full, arr
    finally:
        system.cancel_all()


# --- the run -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="trivial jobs submitted back to back (default 200)")
    parser.add_argument("--latency-jobs", type=int, default=20, help="jobs one after another (default 20)")
    parser.add_argument("--warmup", type=int, default=2, help="latency jobs run first, not counted (default 2)")
    parser.add_argument("--full-jobs", type=int, default=200, help="submissions into a full cluster (default 200)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8], help="client threads (default 1 8)")
    parser.add_argument("--max-seconds", type=float, default=30.0, help="cap on each full-cluster burst, s (30)")
    parser.add_argument("--array", type=int, default=1000, help="array size submitted into the full cluster; 0: none")
    parser.add_argument("--arrays", type=int, default=5, help="arrays submitted, one at a time: the median (5)")
    parser.add_argument("--interval", type=float, default=0.5, help="gpupool controller interval, s (default 0.5)")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up waiting for jobs after this many s")
    parser.add_argument("--skip-install", action="store_true", help="do not apt-get install Slurm if missing")
    parser.add_argument(
        "--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS), help="which to run (default: all three)"
    )
    parser.add_argument(
        "--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS), help="which rows (default: all)"
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write every figure to FILE as JSON")
    return parser.parse_args(argv)


def rows(args: argparse.Namespace) -> list[Row]:
    out = []
    if "latency" in args.workloads:
        out.append(Row("latency", "submit -> job's process running, p50, one job after another", "ms", "lower"))
    if "back_to_back" in args.workloads:
        out.append(
            Row("back_to_back", f"{args.jobs} trivial jobs submitted back to back, end to end", "jobs/s", "higher")
        )
    for clients in args.clients if "full" in args.workloads else []:
        plural = "client" if clients == 1 else "clients"
        out.append(Row(f"full_{clients}", f"submissions/s while the cluster is full, {clients} {plural}", "", "higher"))
    if args.array and "full" in args.workloads:
        out.append(
            Row("array", f"array of {args.array:,} jobs into the full cluster, until accepted (median)", "ms", "lower")
        )
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, dict[str, dict[str, Any]]] = {}
    wall0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        workdir = Path(tempfile.mkdtemp(prefix="slurm-vs-gpupool-"))
        stack.callback(shutil.rmtree, workdir, ignore_errors=True)
        workdir.chmod(0o755)
        head, systems = start_systems(stack, args, workdir)
        for system in systems:
            (workdir / _slug(system.label)).mkdir()

        def each(key: str, measure: Callable[[System, Path], dict[str, Any]]) -> None:
            for system in systems:
                _say(f"{key}: {system.label} ...")
                results.setdefault(key, {})[system.label] = measure(system, workdir / _slug(system.label))

        def with_cpu(system: System, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
            """The measure, with the head's CPU and the machine's busy CPU over it (gpupool only)."""
            if isinstance(system, SlurmSystem):
                return measure()
            head0, busy0 = process_cpu_s(head.process.pid), machine_busy_s()
            out = measure()
            out["head_cpu_s"] = round(process_cpu_s(head.process.pid) - head0, 2)
            out["machine_busy_cpu_s"] = round(machine_busy_s() - busy0, 2)
            return out

        if "latency" in args.workloads:
            each("latency", lambda s, d: latency(s, d, args.latency_jobs, args.warmup, args.timeout))
        if "back_to_back" in args.workloads:
            each("back_to_back", lambda s, d: with_cpu(s, lambda: back_to_back(s, d, args.jobs, args.timeout)))
        for n, clients in enumerate(args.clients if "full" in args.workloads else []):
            for system in systems:
                _say(f"full, {clients} client(s): {system.label} ...")
                array = args.array if n == 0 else 0  # once, on top of the first burst's queue
                d = workdir / _slug(system.label)
                full, arr = while_full(
                    system, d, clients, args.full_jobs, args.max_seconds, array, args.timeout, args.arrays
                )
                results.setdefault(f"full_{clients}", {})[system.label] = full
                if arr is not None:
                    results.setdefault("array", {})[system.label] = arr
        labels = [s.label for s in systems]
    return {
        "benchmark": "slurm_vs_gpupool",
        "machine": machine(),
        "params": {
            "cluster": f"{NODES} nodes x {GPUS_PER_NODE} GPUs, every job 1 GPU; Slurm nodes declare 16 CPUs each",
            "jobs": args.jobs,
            "latency_jobs": args.latency_jobs,
            "warmup": args.warmup,
            "full_jobs": args.full_jobs,
            "clients": args.clients,
            "max_seconds": args.max_seconds,
            "array": args.array,
            "gpupool_interval_s": args.interval,
            "systems": args.systems,
            "workloads": args.workloads,
        },
        "systems": labels,
        "rows": [row.__dict__ for row in rows(args)],
        "results": results,
        "wall_s": round(time.perf_counter() - wall0, 1),
    }


def start_systems(
    stack: contextlib.ExitStack, args: argparse.Namespace, workdir: Path
) -> tuple[RunningHead, list[System]]:
    """The systems ``--systems`` names, in the table's order (Slurm first), each stopped by ``stack``."""
    systems: list[System] = []
    if "slurm" in args.systems:
        layout = SlurmLayout(gpus_per_node=GPUS_PER_NODE, nodes=tuple(f"n{i + 1}" for i in range(NODES)))
        cluster = stack.enter_context(running_slurm(layout, install=not args.skip_install))
        systems.append(SlurmSystem(cluster, workdir))
    head = stack.enter_context(running_head(nodes=NODES, gpus=GPUS_PER_NODE, interval=args.interval))
    if "cli" in args.systems:
        systems.append(GpupoolCli(head, workdir))
    if "api" in args.systems:
        api = GpupoolApi(head, workdir)
        stack.callback(api.close)
        systems.append(api)
    return head, systems


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    """CPU seconds every core spent not idle since boot (``/proc/stat``): supervisors, jobs and
    the benchmark's own clients included, and whatever else the machine runs."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def table(out: dict[str, Any]) -> str:
    has_slurm = out["systems"][0].startswith("Slurm")
    slurm, gpupool = (out["systems"][0], out["systems"][1:]) if has_slurm else (None, out["systems"])
    lines = [
        f"| figure | {' | '.join(out['systems'])} | gpupool best / Slurm |",
        "| --- |" + " --- |" * (len(out["systems"]) + 1),
    ]
    for row in out["rows"]:
        cells = out["results"].get(row["key"], {})
        values = {label: cells.get(label, {}).get("value") for label in out["systems"]}
        shown = [cells.get(label, {}).get("text") or fmt_value(values[label], row["unit"]) for label in out["systems"]]
        slurm_value = values[slurm] if slurm is not None else None
        ratio = best_ratio(slurm_value, [values[g] for g in gpupool], row["better"])
        ratio_text = f"{fmt_value(ratio)}× ({row['better']} is better)" if ratio is not None else "—"
        lines.append(f"| {row['figure']} | {' | '.join(shown)} | {ratio_text} |")
    return "\n".join(lines)


def details(out: dict[str, Any]) -> str:
    lines = [machine_line(out["machine"]), f"{out['params']['cluster']}; wall {out['wall_s']} s"]
    for label, r in out["results"].get("latency", {}).items():
        ms = r["ms"]
        lines.append(f"  latency, {label}: p50 {ms['p50']:.0f} ms, p90 {ms['p90']:.0f} ms, max {ms['max']:.0f} ms")
    for label, r in out["results"].get("back_to_back", {}).items():
        lines.append(
            f"  back to back, {label}: {r['jobs']} submitted in {r['submitting_s']} s, "
            f"all started after {r['end_to_end_s']:.1f} s"
        )
        if "head_cpu_s" in r:
            per_job = 1000 / r["jobs"]
            lines.append(
                f"  back to back, {label}: CPU per job: head {r['head_cpu_s'] * per_job:.1f} ms, "
                f"whole machine {r['machine_busy_cpu_s'] * per_job:.1f} ms"
            )
    for clients in out["params"]["clients"]:
        for label, r in out["results"].get(f"full_{clients}", {}).items():
            cap = ", stopped at the time cap" if r["capped"] else ""
            lines.append(
                f"  full, {clients} client(s), {label}: {r['submissions']} in {r['wall_s']} s{cap}; "
                f"per submission p50 {r['latency_ms']['p50']:.0f} ms"
            )
    return "\n".join(lines)


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in label.lower())


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """SIGTERM ends the run like Ctrl-C does: through every teardown."""
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with _sigterm_unwinds():
        out = run(args)
    print(table(out))
    print(details(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""CLI latency: how long `gpupool <command>` takes, wall clock, as a person typing it would wait.

Starts a fresh head on a small fake cluster, then runs the CLI's everyday commands as real
subprocesses (the ``gpupool`` entry point next to this interpreter), each --runs times, and prints
the median and p90 wall time per command. A round is: submit (a `sleep` on no GPU), show it, why,
cancel it, jobs, nodes, --version, so each figure includes the interpreter's start, the imports,
one HTTP round trip (none for --version) and the rendering. It also prints what ``python -X
importtime`` says ``import gpupool.cli.main`` costs (its cumulative figure, the median of --runs)
and the floor under everything: ``python -c pass``.

With ``--loops N`` (default 8) it then runs N shell loops at once, each submitting --loop-jobs jobs
with ``gpupool submit`` one after another, as a script sweeping parameters would, and prints the
submissions a second (issue 36's target: 30 with 8 loops on a 2-core machine; sbatch did 159),
of 1-GPU jobs that queue behind jobs holding every GPU.

gpupool's modules are byte-compiled first, as ``pip install`` leaves them: an interpreter run with
PYTHONDONTWRITEBYTECODE=1 (as on this development VM) would otherwise compile every module it
imports on every run.

Figures are noisy on a shared machine: compare medians of several runs taken on the same machine.

    .venv/bin/python benchmarks/cli_latency.py [--runs 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from _head import gpupool_command, machine, machine_line, percentile, running_head

NODES, GPUS_PER_NODE = 2, 4
GPUS = NODES * GPUS_PER_NODE
COMMANDS = ("version", "jobs", "submit", "show", "why", "cancel", "nodes")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="rounds measured (default 20)")
    parser.add_argument("--warmup", type=int, default=2, help="rounds run first and not counted (default 2)")
    parser.add_argument(
        "--commands", default=",".join(COMMANDS), help=f"which of {','.join(COMMANDS)} to time (default all)"
    )
    parser.add_argument("--loops", type=int, default=8, help="shell loops of submit run at once (default 8; 0: none)")
    parser.add_argument("--loop-jobs", type=int, default=25, help="jobs each loop submits (default 25)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return parser.parse_args(argv)


def timed(argv: Sequence[str], env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds of one run, and its stdout; a failed command stops the benchmark."""
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return elapsed, done.stdout


def one_round(cli: list[str], env: dict[str, str], wanted: set[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    took, stdout = timed([*cli, "submit", "--gpus", "0", "--name", "bench", "--", "sleep", "600"], env)
    job_id = stdout.strip().splitlines()[-1]
    out["submit"] = took
    out["show"], _ = timed([*cli, "show", job_id], env)
    out["why"], _ = timed([*cli, "why", job_id], env)
    out["cancel"], _ = timed([*cli, "cancel", job_id], env)
    out["jobs"], _ = timed([*cli, "jobs"], env)
    out["nodes"], _ = timed([*cli, "nodes"], env)
    if "version" in wanted:
        out["version"], _ = timed([*cli, "--version"], env)
    return {k: v for k, v in out.items() if k in wanted}


def import_time_us(env: dict[str, str]) -> int:
    """The cumulative microseconds ``-X importtime`` gives ``gpupool.cli.main``."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import gpupool.cli.main"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \| gpupool\.cli\.main$", line)
        if match:
            return int(match.group(1))
    raise RuntimeError(f"no gpupool.cli.main line in -X importtime's output:\n{done.stderr[-2000:]}")


def bare_python_s(env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    return time.perf_counter() - t0


def compile_gpupool() -> None:
    """Byte-compile gpupool's package where it is installed (or checked out), quietly."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("gpupool")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            compileall.compile_dir(location, quiet=1)


def shell_loops(cli: list[str], env: dict[str, str], loops: int, jobs: int) -> float:
    """Submissions a second from ``loops`` shell loops at once, each submitting ``jobs`` 1-GPU jobs
    with ``gpupool submit``, one after another, into a cluster whose GPUs are all taken first, so
    the jobs queue (as slurm_vs_gpupool.py's "while full" row: the figure is the CLI's and the
    API's, not the cost of starting jobs)."""
    for _ in range(GPUS):
        timed([*cli, "submit", "--gpus", "1", "--name", "fill", "--", "sleep", "600"], env)
    command = " ".join(cli)
    script = f"for i in $(seq {jobs}); do {command} submit --gpus 1 --name loop -- sleep 600 >/dev/null || exit 1; done"
    t0 = time.perf_counter()
    running = [subprocess.Popen(["bash", "-c", script], env=env) for _ in range(loops)]
    codes = [p.wait() for p in running]
    took = time.perf_counter() - t0
    if any(codes):
        raise RuntimeError(f"a loop failed: exit codes {codes}")
    return loops * jobs / took


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wanted = set(args.commands.split(","))
    if unknown := wanted - set(COMMANDS):
        raise SystemExit(f"unknown command(s): {', '.join(sorted(unknown))}")
    cli = gpupool_command()
    compile_gpupool()
    loop_rate = None
    samples: dict[str, list[float]] = {c: [] for c in COMMANDS if c in wanted}
    with running_head(nodes=NODES, gpus=GPUS_PER_NODE) as head:
        env = dict(os.environ, GPUPOOL_URL=head.url, GPUPOOL_TOKEN=head.token)
        for i in range(args.warmup + args.runs):
            got = one_round(cli, env, wanted)
            if i >= args.warmup:
                for command, took in got.items():
                    samples[command].append(took)
        if args.loops:
            loop_rate = shell_loops(cli, env, args.loops, args.loop_jobs)
    env = dict(os.environ)
    imports = [import_time_us(env) for _ in range(args.runs)]
    floor = [bare_python_s(env) for _ in range(args.runs)]
    result = {
        "machine": machine(),
        "runs": args.runs,
        "commands": {
            c: {"p50_ms": round(statistics.median(v) * 1000, 1), "p90_ms": round(percentile(v, 90) * 1000, 1)}
            for c, v in samples.items()
        },
        "import_gpupool_cli_main_ms": round(statistics.median(imports) / 1000, 1),
        "python_c_pass_ms": round(statistics.median(floor) * 1000, 1),
        "shell_loops": None
        if loop_rate is None
        else {"loops": args.loops, "jobs_each": args.loop_jobs, "submissions_per_s": round(loop_rate, 1)},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(machine_line(result["machine"]))
    print(f"{args.runs} runs each; wall clock of the whole subprocess, ms")
    print(f"{'command':<12}{'median':>10}{'p90':>10}")
    for command, figures in result["commands"].items():
        label = "--version" if command == "version" else command
        print(f"{label:<12}{figures['p50_ms']:>10}{figures['p90_ms']:>10}")
    print(f"import gpupool.cli.main (-X importtime, cumulative, median): {result['import_gpupool_cli_main_ms']} ms")
    print(f"python -c pass (median): {result['python_c_pass_ms']} ms")
    if loop_rate is not None:
        print(f"{args.loops} shell loops of gpupool submit at once: {loop_rate:.1f} submissions/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

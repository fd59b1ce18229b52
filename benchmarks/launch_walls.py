"""What each wall costs a worker's launch (issue 29): from the node runtime's launch call until the
job's first command ran, through the real supervisor (forked by the zygote), with only the cgroup,
then the cgroup and the device program (eight stand-in GPUs, NVIDIA's major), then the cgroup and
the job's private namespace (/tmp, /dev/shm, /proc), then all of them. Needs root and cgroups.

    sudo .venv/bin/python benchmarks/launch_walls.py [--launches 60] [--rounds 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import stat
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _head import machine, machine_line
from _node import bench_runtime, root_job

VARIANTS = (("cgroup only", False, False), ("+ device program", False, True), ("+ namespace", True, False))
ALL = ("all walls", True, True)


def stand_ins(dev: Path) -> None:
    for minor in range(8):
        os.mknod(dev / f"nvidia{minor}", 0o666 | stat.S_IFCHR, os.makedev(195, minor))
    os.mknod(dev / "nvidiactl", 0o666 | stat.S_IFCHR, os.makedev(195, 255))


def measure(root: Path, tag: str, namespace: bool, program: bool, launches: int, round_: int) -> list[float]:
    data = root / f"{tag.replace(' ', '-').strip('+-')}-{round_}"  # fresh run dirs: old exits would answer
    rt = bench_runtime(data, 8, device_dir=root / "dev")
    if not namespace:
        rt.walls.scratch_why = "off for this measurement"
    if not program and rt.layout is not None:
        rt.layout = rt.walls.layout = dataclasses.replace(rt.layout, device_program=False)
    stamp = root / "stamp"  # outside /tmp: the job's /tmp is its own
    took = []
    try:
        for i in range(launches):
            started = time.time()
            argv = ("/bin/sh", "-c", f"date +%s.%N > {stamp}")
            handle = rt.launch(root_job(i + 1, argv, memory_mib=256, gpus=(0,)))
            while (ended := rt.poll(handle)) is None:
                time.sleep(0.001)
            if ended.exit_code != 0:
                raise SystemExit(f"launch_walls: a job failed ({ended}): {rt.read_log(i + 1, 0).decode()}")
            took.append((float(stamp.read_text()) - started) * 1000)
    finally:
        rt.close()
    return took[5:]  # the zygote's first forks warm up


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=60, help="launches per variant and round (default 60)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of all variants, interleaved (default 2)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("launch_walls: needs root (cgroups, namespaces, device programs)", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="gpupool-walls-", dir="/var/tmp"))
    (root / "dev").mkdir()
    stand_ins(root / "dev")
    results: dict[str, list[float]] = {}
    try:
        for round_ in range(args.rounds):
            for tag, namespace, program in (*VARIANTS, ALL):
                results.setdefault(tag, []).extend(measure(root, tag, namespace, program, args.launches, round_))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"launch -> the job's first command ran, {args.rounds} x {args.launches} launches each")
    print(machine_line(machine()))
    for tag, took in results.items():
        took.sort()
        print(f"  {tag:<18} p50 {statistics.median(took):6.1f} ms   p90 {took[int(len(took) * 0.9)]:6.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

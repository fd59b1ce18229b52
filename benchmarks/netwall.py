"""What the port wall costs a job's connects (issue 30): every connect() of every worker passes the
node's cgroup connect programs (node/netwall.py), so a job that opens many connections (data
loaders, NCCL's bootstrap, a client under load) pays it on each. A real worker, launched by the node
runtime, times N connects to a listener on 127.0.0.1 (one another job does not serve: what almost
every connect is) with the programs attached and with them taken off, interleaved. Needs root and
cgroup v2.

    sudo .venv/bin/python benchmarks/netwall.py [--connects 5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from _head import machine, machine_line
from _node import bench_runtime, root_job

from gpupool.node import netwall

TIMED = (
    "import socket, sys, time\n"
    "port, n = int(sys.argv[1]), int(sys.argv[2])\n"
    "took = []\n"
    "for _ in range(n):\n"
    "    s = socket.socket(); t = time.perf_counter(); s.connect(('127.0.0.1', port))\n"
    "    took.append(time.perf_counter() - t); s.close()\n"
    "took.sort(); print('US', took[len(took) // 2] * 1e6, took[int(len(took) * 0.9)] * 1e6, flush=True)\n"
)


def accept_all(server: socket.socket) -> None:
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        conn.close()


def measure(root: Path, walled: bool, connects: int, round_: int, port: int) -> tuple[float, float]:
    rt = bench_runtime(root / f"{'on' if walled else 'off'}-{round_}", 1)
    wall = rt.walls.netwall
    if wall is None:
        raise SystemExit(f"netwall: no connect programs here: {rt.walls.network_why}")
    if not walled:
        netwall.detach(wall.group)
    try:
        handle = rt.launch(root_job(1, (sys.executable, "-c", TIMED, str(port), str(connects))))
        while (ended := rt.poll(handle)) is None:
            time.sleep(0.01)
        said = rt.read_log(1, 0).decode()
        if ended.exit_code != 0 or "US " not in said:
            raise SystemExit(f"netwall: the timing job failed ({ended}): {said}")
        p50, p90 = said.split("US ", 1)[1].split()[:2]
        return float(p50), float(p90)
    finally:
        rt.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connects", type=int, default=5000, help="connects per job (default 5000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both variants, interleaved (default 3)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("netwall: needs root (cgroups, BPF programs)", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="gpupool-netwall-", dir="/var/tmp"))
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1024)
    threading.Thread(target=accept_all, args=(server,), daemon=True).start()
    results: dict[str, list[tuple[float, float]]] = {"without the wall": [], "with the wall": []}
    try:
        for round_ in range(args.rounds):
            for walled, tag in ((False, "without the wall"), (True, "with the wall")):
                results[tag].append(measure(root, walled, args.connects, round_, server.getsockname()[1]))
    finally:
        server.close()
        shutil.rmtree(root, ignore_errors=True)
    print(f"connect() to 127.0.0.1 from a worker, {args.rounds} rounds x {args.connects} connects, median of rounds")
    print(machine_line(machine()))
    for tag, rounds in results.items():
        p50 = statistics.median(r[0] for r in rounds)
        p90 = statistics.median(r[1] for r in rounds)
        print(f"  {tag:<17} p50 {p50:6.1f} us   p90 {p90:6.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())

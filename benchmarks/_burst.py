"""Submissions from several client threads at once, timed: the loop the throughput benchmarks share.

``burst()`` takes one submit function per thread (each keeps its own connection, process or
whatever a submission needs), releases the threads together, and records when each submission
ended and how long it took. It knows nothing of what is submitted to: ``submit_throughput.py``
gives it httpx clients, ``slurm_vs_gpupool.py`` also ``sbatch`` and ``gpupool submit``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass
class Burst:
    done: list[tuple[float, float]]  # (perf_counter at the end, latency in s), in order of ending
    t0: float  # perf_counter when the threads were released
    wall_s: float
    errors: list[str]

    @property
    def per_s(self) -> float:
        return len(self.done) / self.wall_s if self.wall_s > 0 else float("nan")


def burst(submitters: Sequence[Callable[[], object]], jobs: int, max_s: float) -> Burst:
    """Make ``jobs`` submissions shared out among ``submitters`` (one thread each), or fewer if
    ``max_s`` runs out. A submit function raises to say it failed; its thread then stops."""
    threads = len(submitters)
    shares = [jobs // threads + (1 if i < jobs % threads else 0) for i in range(threads)]
    ended: list[list[tuple[float, float]]] = [[] for _ in range(threads)]
    errors: list[str] = []
    start = threading.Barrier(threads + 1)

    def worker(i: int) -> None:
        submit, mine = submitters[i], ended[i]
        start.wait()
        deadline = time.perf_counter() + max_s
        for _ in range(shares[i]):
            t = time.perf_counter()
            if t > deadline:
                return
            try:
                submit()
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
                return
            end = time.perf_counter()
            mine.append((end, end - t))

    pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for thread in pool:
        thread.start()
    start.wait()
    t0 = time.perf_counter()
    for thread in pool:
        thread.join()
    wall = time.perf_counter() - t0
    return Burst(sorted(x for per in ended for x in per), t0, wall, errors)


def quarters(done: list[tuple[float, float]], t0: float) -> list[float]:
    """Submissions/s in each quarter of the run, in submission order: shows a slowdown as the queue grows."""
    rates, previous_end, n = [], t0, len(done)
    for q in range(4):
        chunk = done[q * n // 4 : (q + 1) * n // 4]
        if not chunk:
            continue
        end = chunk[-1][0]
        rates.append(round(len(chunk) / max(end - previous_end, 1e-9), 1))
        previous_end = end
    return rates

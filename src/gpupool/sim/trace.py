"""Job traces: gpupool's own CSV format, and loaders mapping public traces onto it (Philly,
Tiresias, Microsoft ITP via ElasticFlow, Alibaba openb pod lists; ``load(path, fmt)``).

gpupool format (seconds): ``job_id,submit_time,duration,gpus[,workers,cpus,memory_mib,project,
user,priority,gpu_model,min_workers]``; ``gpus`` is per worker (a fraction below 1, or 0 for CPU only), ``cpus``
too (cores such as 0.5, or millicores such as 500m);
``gpu_model`` may list allowed models separated by ``|``; an empty ``duration`` never ends.
A ``min_workers`` below ``workers`` makes the job elastic (issue 35): it starts on ``min_workers``
and may grow to ``workers``, its width in the trace, at which ``duration`` was measured
(``elastic.py`` has the speed model); empty, or equal to ``workers``, a rigid gang.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from gpupool.domain.errors import GpupoolError, InvalidInput
from gpupool.domain.jobs import JobSpec
from gpupool.domain.users import check_user_name
from gpupool.sim.trace_job import TraceJob as TraceJob  # defined apart (workload needs it); importable here too
from gpupool.sim.workload import Window

GPUS_PER_NODE = 8  # what Philly, ITP and Tiresias' simulators model a node as
REQUIRED = ("job_id", "submit_time", "duration", "gpus")
DATED_FORMATS = frozenset({"philly"})  # submit times are dates (epoch seconds once loaded)


def load(path: Path, fmt: str = "auto", window: Window | None = None) -> list[TraceJob]:
    """Jobs sorted by submit time, with submit times relative to the first one (or to the
    window's start: ``workload.Window``)."""
    if fmt == "auto":
        fmt = _detect(path)
    loaders = {
        "gpupool": load_gpupool,
        "philly": load_philly,
        "tiresias": load_tiresias,
        "itp": load_itp,
        "openb": load_openb,
    }
    if fmt not in loaders:
        raise InvalidInput(f"unknown trace format {fmt!r}: use one of auto, {', '.join(loaders)}")
    jobs = loaders[fmt](path)
    if window is None:
        return _relative(jobs)
    chosen, origin = window.select(jobs, dated=fmt in DATED_FORMATS)
    return _relative(chosen, origin)


def load_gpupool(path: Path) -> list[TraceJob]:
    rows = read_rows(path)
    missing = [c for c in REQUIRED if c not in (rows[0].keys() if rows else REQUIRED)]
    if missing:
        raise InvalidInput(f"{path}: the header lacks {', '.join(missing)} (gpupool trace format)")
    jobs = []
    for line, row in enumerate(rows, start=2):
        try:
            duration = row["duration"].strip()
            gpus = float(row["gpus"])
            workers = int(row.get("workers") or 1)
            least = (row.get("min_workers") or "").strip()
            if least.isdigit() and int(least) > workers:
                raise ValueError(f"min_workers {least} is above workers {workers} (the most it runs on)")
            spec = JobSpec.create(
                command=("sim",),
                name=row["job_id"],
                project=row.get("project") or "default",
                gpus=gpus,
                workers=f"{least}:{workers}" if least else workers,
                cpus=row.get("cpus") or 0,
                memory=int(row.get("memory_mib") or 0),
                priority=row.get("priority") or "train",
                gpu_model=row.get("gpu_model") or None,
            )
            user = (row.get("user") or "").strip()
            if user:
                check_user_name(user)
            end = float(duration) if duration else None
            job = TraceJob(row["job_id"], float(row["submit_time"]), end, spec, user)
        except (ValueError, GpupoolError) as exc:
            raise InvalidInput(f"{path}:{line}: {exc}") from None
        if job.duration is not None and (job.duration < 0 or math.isnan(job.duration)):
            raise InvalidInput(f"{path}:{line}: duration must be >= 0 seconds")
        jobs.append(job)
    return jobs


def load_philly(path: Path) -> list[TraceJob]:
    """The Philly job table (``timestamp,duration,num_gpus,gpu_time,cluster``): each virtual
    cluster becomes a project; jobs larger than an 8-GPU node become gangs (see ``node_gang``)."""

    def parse(line: int, row: dict[str, str]) -> TraceJob:
        workers, per_worker = node_gang(int(row["num_gpus"]))
        spec = JobSpec.create(
            command=("sim",), name=f"philly-{line}", project=f"vc-{row['cluster']}", gpus=per_worker, workers=workers
        )
        submit = datetime.fromisoformat(row["timestamp"]).timestamp()
        return TraceJob(f"philly-{line}", submit, float(row["duration"]), spec)

    return _parse_rows(path, "a Philly job", parse)


def load_tiresias(path: Path) -> list[TraceJob]:
    """Tiresias' simulator input (``job_id,num_gpu,submit_time,...,duration``), seconds."""

    def parse(line: int, row: dict[str, str]) -> TraceJob:
        workers, per_worker = node_gang(int(row["num_gpu"]))
        spec = JobSpec.create(command=("sim",), name=f"tiresias-{row['job_id']}", gpus=per_worker, workers=workers)
        return TraceJob(row["job_id"], float(row["submit_time"]), float(row["duration"]), spec)

    return _parse_rows(path, "a Tiresias job", parse)


def load_itp(path: Path) -> list[TraceJob]:
    """Microsoft ITP clusters as ElasticFlow published them: ``raw/clusterNN.csv``
    (``job_id,submission_time,duration,num_gpu``, seconds) or ``elasticflow/clusterNN.csv``, which
    adds synthetic model, iteration, batch and deadline columns; those are ignored, as gpupool
    schedules neither by deadline nor by throughput. The trace has no tenants: one project,
    "default". Jobs above 8 GPUs (16, 32, 64) become gangs of whole 8-GPU nodes, as ElasticFlow
    simulates them on ``nXg8`` clusters."""

    def parse(line: int, row: dict[str, str]) -> TraceJob:
        workers, per_worker = node_gang(int(row["num_gpu"]))
        spec = JobSpec.create(command=("sim",), name=row["job_id"], gpus=per_worker, workers=workers)
        return TraceJob(row["job_id"], float(row["submission_time"]), _seconds(float(row["duration"])), spec)

    return _parse_rows(path, "an ITP job", parse)


def load_openb(path: Path) -> list[TraceJob]:
    """An Alibaba GPU v2023 ("openb", FGD) pod list; each pod is a one-worker job.

    * ``gpus``: ``gpu_milli/1000`` of one shared GPU when ``num_gpu`` is 1 and ``gpu_milli`` is
      below 1000, else ``num_gpu`` whole GPUs (0: a CPU-only pod, whose ``gpu_milli`` is 0).
      The smallest share in the files is 50 milli, above JobSpec's 1/1000 step, so every share
      is kept exactly.
    * ``cpu_milli`` exactly, as JobSpec counts CPUs (2500 is 2.5 cores, shared; 4000 pins 4).
      ``memory_mib`` as is (a few pods ask for 0 MiB, which JobSpec accepts).
    * ``gpu_model``: ``gpu_spec`` as is, an allowed-model list like ``V100M16|V100M32`` (a few
      repeat a model, which the scheduler's set of models absorbs); empty means any model.
    * ``submit_time``: ``creation_time``; ``duration``: ``deletion_time - creation_time`` (a few
      are 0: a pod deleted when created still arrives and leaves at once), or None (never ends)
      when ``deletion_time`` is empty. ``qos`` and ``pod_phase`` are not modelled: every pod is a
      train job, as FGD places every pod whatever its phase.
    * The ``multigpu*`` lists have no times: pods arrive one a second in file order and never
      end, a placement study as FGD ran them.

    Every field of all 24 published pod lists maps onto a JobSpec without being altered.
    """

    def parse(line: int, row: dict[str, str]) -> TraceJob:
        spec = JobSpec.create(
            command=("sim",),
            name=row["name"],
            gpus=_pod_gpus(int(row["num_gpu"]), int(row["gpu_milli"])),
            cpus=f"{int(row['cpu_milli'])}m",
            memory=int(row["memory_mib"]),
            gpu_model=row.get("gpu_spec") or None,
        )
        if "creation_time" not in row:  # a multigpu* list
            return TraceJob(row["name"], float(line - 2), None, spec)
        created, deleted = float(row["creation_time"]), (row.get("deletion_time") or "").strip()
        return TraceJob(row["name"], created, _seconds(float(deleted) - created) if deleted else None, spec)

    return _parse_rows(path, "an openb pod", parse)


def node_gang(gpus: int, per_node: int = GPUS_PER_NODE) -> tuple[int, int]:
    """(workers, GPUs per worker) for a whole-GPU request. Up to a node's worth it is one worker;
    beyond, the fewest equal workers that each fit a node: whole nodes when the count divides
    (64 -> 8 x 8), as the traces' own simulators run such jobs, and the GPU total is kept exactly
    when it does not (Philly's 12-GPU jobs become 2 x 6, not 1 x 8)."""
    if gpus <= per_node:
        return 1, gpus
    workers = -(-gpus // per_node)
    while gpus % workers:
        workers += 1
    return workers, gpus // workers


def _pod_gpus(num_gpu: int, gpu_milli: int) -> float:
    if num_gpu == 1 and gpu_milli < 1000:
        return gpu_milli / 1000
    return float(num_gpu)


def _seconds(duration: float) -> float:
    """A duration in seconds: a negative or NaN one is a broken row, not a job that ends early."""
    if not duration >= 0:
        raise ValueError(f"duration must be >= 0 seconds, got {duration:g}")
    return duration


def _parse_rows(path: Path, what: str, parse: Callable[[int, dict[str, str]], TraceJob]) -> list[TraceJob]:
    """Each row through ``parse(line, row)``; any bad field is one ``path:line:`` error."""
    jobs = []
    for line, row in enumerate(read_rows(path), start=2):
        try:
            jobs.append(parse(line, row))
        except KeyError as exc:
            raise InvalidInput(f"{path}:{line}: not {what} row: no column {exc}") from None
        except TypeError:  # csv gives None for the fields of a short row
            raise InvalidInput(f"{path}:{line}: not {what} row: too few fields") from None
        except (ValueError, GpupoolError) as exc:
            raise InvalidInput(f"{path}:{line}: not {what} row: {exc}") from None
    return jobs


def fit_to_nodes(jobs: list[TraceJob], gpus_per_node: int) -> list[TraceJob]:
    """A one-worker job asking more whole GPUs than a node has becomes a gang of whole nodes
    (when it divides evenly), as the public traces' own simulators treat them."""
    if gpus_per_node < 1:
        return jobs
    out = []
    for job in jobs:
        spec = job.spec
        if spec.workers == 1 and not spec.elastic and spec.gpus > gpus_per_node and spec.gpus % gpus_per_node == 0:
            spec = replace(spec, gpus=float(gpus_per_node), workers=int(spec.gpus) // gpus_per_node)
            job = replace(job, spec=spec)
        out.append(job)
    return out


def _relative(jobs: Iterable[TraceJob], origin: float | None = None) -> list[TraceJob]:
    ordered = sorted(jobs, key=lambda j: j.submit_time)
    if not ordered:
        return []
    t0 = ordered[0].submit_time if origin is None else origin
    return [replace(j, submit_time=j.submit_time - t0) for j in ordered]


def read_rows(path: Path, what: str = "trace") -> list[dict[str, str]]:
    """The rows of a CSV file with a header; an unreadable file is one clear error."""
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError as exc:
        raise InvalidInput(f"cannot read the {what} {path}: {exc.strerror}") from None


def _detect(path: Path) -> str:
    try:
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
    except OSError as exc:
        raise InvalidInput(f"cannot read the trace {path}: {exc.strerror}") from None
    if {"timestamp", "num_gpus", "cluster"} <= set(header):
        return "philly"
    if {"job_id", "num_gpu", "submit_time", "duration"} <= set(header):
        return "tiresias"
    if {"submission_time", "num_gpu"} <= set(header):
        return "itp"
    if {"name", "cpu_milli", "num_gpu", "gpu_milli"} <= set(header):
        return "openb"
    if set(REQUIRED) <= set(header):
        return "gpupool"
    raise InvalidInput(f"{path}: unknown trace format (header {','.join(header)}); pass --format")

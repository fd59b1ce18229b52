"""Job traces: gpupool's own CSV format, and loaders mapping public traces onto it.

gpupool format (seconds): ``job_id,submit_time,duration,gpus[,workers,cpus,memory_mib,project,
user,priority,gpu_model]``; ``gpus`` is per worker (a fraction below 1, or 0 for CPU only);
``gpu_model`` may list allowed models separated by ``|``; an empty ``duration`` never ends.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from gpupool.domain.errors import GpupoolError, InvalidInput
from gpupool.domain.jobs import JobSpec

GPUS_PER_PHILLY_NODE = 8
REQUIRED = ("job_id", "submit_time", "duration", "gpus")


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: str
    submit_time: float
    duration: float | None  # None: never ends (placement studies)
    spec: JobSpec


def load(path: Path, fmt: str = "auto") -> list[TraceJob]:
    """Jobs sorted by submit time, with submit times relative to the first one."""
    if fmt == "auto":
        fmt = _detect(path)
    loaders = {"gpupool": load_gpupool, "philly": load_philly, "tiresias": load_tiresias}
    if fmt not in loaders:
        raise InvalidInput(f"unknown trace format {fmt!r}: use one of auto, {', '.join(loaders)}")
    return _relative(loaders[fmt](path))


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
            spec = JobSpec.create(
                command=("sim",),
                name=row["job_id"],
                project=row.get("project") or "default",
                gpus=gpus,
                workers=workers,
                cpus=int(row.get("cpus") or 0),
                memory=int(row.get("memory_mib") or 0),
                priority=row.get("priority") or "train",
                gpu_model=row.get("gpu_model") or None,
            )
            job = TraceJob(row["job_id"], float(row["submit_time"]), float(duration) if duration else None, spec)
        except (ValueError, GpupoolError) as exc:
            raise InvalidInput(f"{path}:{line}: {exc}") from None
        if job.duration is not None and (job.duration < 0 or math.isnan(job.duration)):
            raise InvalidInput(f"{path}:{line}: duration must be >= 0 seconds")
        jobs.append(job)
    return jobs


def load_philly(path: Path) -> list[TraceJob]:
    """The Philly job table (``timestamp,duration,num_gpus,gpu_time,cluster``): each virtual
    cluster becomes a project; jobs larger than an 8-GPU node become gangs of whole nodes."""
    jobs = []
    for line, row in enumerate(read_rows(path), start=2):
        try:
            submit = datetime.fromisoformat(row["timestamp"]).timestamp()
            gpus = int(row["num_gpus"])
            workers, per_worker = (gpus // GPUS_PER_PHILLY_NODE, GPUS_PER_PHILLY_NODE) if gpus > 8 else (1, gpus)
            spec = JobSpec.create(
                command=("sim",),
                name=f"philly-{line}",
                project=f"vc-{row['cluster']}",
                gpus=per_worker,
                workers=max(workers, 1),
            )
            jobs.append(TraceJob(f"philly-{line}", submit, float(row["duration"]), spec))
        except (KeyError, ValueError, GpupoolError) as exc:
            raise InvalidInput(f"{path}:{line}: not a Philly job row: {exc}") from None
    return jobs


def load_tiresias(path: Path) -> list[TraceJob]:
    """Tiresias' simulator input (``job_id,num_gpu,submit_time,...,duration``), seconds."""
    jobs = []
    for line, row in enumerate(read_rows(path), start=2):
        try:
            gpus = int(row["num_gpu"])
            workers, per_worker = (gpus // GPUS_PER_PHILLY_NODE, GPUS_PER_PHILLY_NODE) if gpus > 8 else (1, gpus)
            spec = JobSpec.create(
                command=("sim",), name=f"tiresias-{row['job_id']}", gpus=per_worker, workers=max(workers, 1)
            )
            jobs.append(TraceJob(row["job_id"], float(row["submit_time"]), float(row["duration"]), spec))
        except (KeyError, ValueError, GpupoolError) as exc:
            raise InvalidInput(f"{path}:{line}: not a Tiresias job row: {exc}") from None
    return jobs


def fit_to_nodes(jobs: list[TraceJob], gpus_per_node: int) -> list[TraceJob]:
    """A one-worker job asking more whole GPUs than a node has becomes a gang of whole nodes
    (when it divides evenly), as the public traces' own simulators treat them."""
    if gpus_per_node < 1:
        return jobs
    out = []
    for job in jobs:
        spec = job.spec
        if spec.workers == 1 and spec.gpus > gpus_per_node and spec.gpus % gpus_per_node == 0:
            spec = replace(spec, gpus=float(gpus_per_node), workers=int(spec.gpus) // gpus_per_node)
            job = replace(job, spec=spec)
        out.append(job)
    return out


def _relative(jobs: Iterable[TraceJob]) -> list[TraceJob]:
    ordered = sorted(jobs, key=lambda j: j.submit_time)
    if not ordered:
        return []
    t0 = ordered[0].submit_time
    return [TraceJob(j.job_id, j.submit_time - t0, j.duration, j.spec) for j in ordered]


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
    if set(REQUIRED) <= set(header):
        return "gpupool"
    raise InvalidInput(f"{path}: unknown trace format (header {','.join(header)}); pass --format")

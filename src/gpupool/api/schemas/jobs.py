"""Job request/response models. Field names here are a contract scripts depend on."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from gpupool.domain.jobs import Placement
from gpupool.domain.records import Event, JobRecord, WorkerUsage


class SubmitRequest(BaseModel):
    """``domain.jobs.Submission`` as the API documents and checks it: the same names
    (tests/domain/test_jobspec.py keeps them equal); ``JobSpec.create`` does the rest."""

    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(description="argument vector; never run through a shell (empty: an image's own)")
    name: str | None = None
    project: str | None = None
    gpus: float = Field(1.0, description="per worker: 0 (CPU only), a fraction below 1, or a whole number")
    workers: int | str = Field(
        1, description="a gang of this many workers, or an elastic range 'MIN:MAX' (e.g. '2:8'): it starts on MIN"
    )
    max_workers: int | None = Field(
        None, description="elastic: the most workers it may grow to (workers then being its least); or give '2:8'"
    )
    cpus: float | int | str = Field(
        0, description="per worker: cores (2, pinned; 0.5, a share of unpinned cores) or millicores ('500m')"
    )
    memory: str | int | None = Field(None, description="per worker, e.g. 8G or 512M, or MiB as a number")
    priority: str = "train"
    max_restarts: int = 0
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    gpu_model: str | None = None
    max_runtime_s: int | None = None
    gpu_memory: str | int | None = Field(
        None, description="fractional: GPU memory it needs on the shared GPU; whole: least memory per GPU"
    )
    checkpoint_dir: str | None = Field(
        None,
        description="given to every worker as GPUPOOL_CHECKPOINT_DIR; absolute, or relative to workdir. "
        "The job creates it and owns what is in it",
    )
    expose: int | None = Field(
        None, description="a port (1 to 65535) worker 0 listens on: the gateway publishes it at /jobs/<id>/"
    )
    image: str | None = Field(
        None,
        description="an OCI image its workers run in: a registry image (nvcr.io/nvidia/pytorch:24.10-py3), a"
        " name an admin imported, or an OCI layout or archive on a shared path (oci:/path, oci-archive:/x.tar);"
        " with an image the command may be empty: the image's Entrypoint and Cmd run",
    )
    gpu_power: str | None = Field(
        None,
        max_length=16,
        description="its GPUs' power mode: max (the GPU's default), efficient (the calibrated point at most"
        " 20 % slower, for less energy) or a power limit such as 400W; null: the project's default, else max",
    )


HIDDEN_FIELDS = ("command", "env", "workdir", "checkpoint_dir")  # of jobs the caller may not act on


class PlacementOut(BaseModel):
    worker: int
    node: str
    gpus: list[int]
    gpu_share: float | None = None
    gpu_memory_mib: int | None = None
    cpus: list[int] = Field(
        default_factory=list, description="pinned cores; with cpu_milli, the unpinned cores it shares"
    )
    cpu_milli: int | None = Field(None, description="a fraction of a core: its millicores; null: cpus are pinned")

    @classmethod
    def of(cls, p: Placement) -> PlacementOut:
        return cls(
            worker=p.worker,
            node=p.node,
            gpus=list(p.gpus),
            gpu_share=p.gpu_share or None,
            gpu_memory_mib=p.gpu_memory_mib or None,
            cpus=list(p.cpus),
            cpu_milli=p.cpu_milli or None,
        )


class UsageOut(BaseModel):
    worker: int
    memory_mib: int | None = Field(description="memory its processes use now (MiB), page cache included")
    memory_peak_mib: int | None
    cpu_pct: float | None = Field(description="CPU use since the reading before, 100 = one core busy")
    at: datetime

    @classmethod
    def of(cls, u: WorkerUsage) -> UsageOut:
        return cls(
            worker=u.worker, memory_mib=u.memory_mib, memory_peak_mib=u.memory_peak_mib, cpu_pct=u.cpu_pct, at=u.at
        )


class JobOut(BaseModel):
    id: int
    name: str
    project: str
    owner: str
    state: str
    command: list[str] | None = Field(
        description="null where hidden: only its owner, a manager of its project or an admin sees"
        " the command, environment, working directory and checkpoint directory"
    )
    gpus: float
    workers: int = Field(description="a gang's size; an elastic job's least (the minimum it starts on)")
    max_workers: int | None = Field(
        None, description="elastic: the most workers it may grow to; null: a gang of exactly workers"
    )
    cpus: float = Field(description="per worker, in cores (0.5); cpu_milli is the exact figure")
    cpu_milli: int = Field(description="per worker, in millicores: whole cores are pinned, a fraction shares")
    memory_mib: int
    priority: str
    max_restarts: int
    gpu_model: str | None
    gpu_memory_mib: int
    workdir: str | None
    checkpoint_dir: str | None
    max_runtime_s: int | None
    env: dict[str, str] | None
    placements: list[PlacementOut]
    reason_code: str | None
    reason: str | None
    exit_code: int | None
    exit_reason: str | None = Field(
        None, description="why its last attempt ended, when the node knows: oom (killed at its --memory limit)"
    )
    run_as: str | None = Field(
        None, description="the Unix account its workers run as; null: the node's own user (single-user mode)"
    )
    array_id: int | None = Field(None, description="a task of an array: the array's id (its first task's job id)")
    array_index: int | None = Field(None, description="a task of an array: its index (GPUPOOL_ARRAY_INDEX)")
    service: str | None = Field(None, description="a replica of a service: the service's name")
    port_env: str | None = Field(None, description="a replica: the variable its port is passed in")
    expose: int | None = Field(None, description="the port of worker 0 the gateway publishes at /jobs/<id>/")
    url: str | None = Field(
        None, description="with expose: where the gateway serves it (in a job's detail; null with no gateway)"
    )
    image: str | None = Field(None, description="the OCI image its workers run in, as asked for; null: none")
    image_digest: str | None = Field(
        None, description="with an image: the manifest digest its last attempt ran in, once a node reported it"
    )
    gpu_power: str | None = Field(None, description="its GPUs' power mode as asked for (max, efficient, 400W)")
    usage: list[UsageOut] = Field(
        default_factory=list,
        description="each running worker's memory and CPU use, from its cgroup at the last telemetry reading",
    )
    restarts: int
    starts: int
    cancel_requested: bool
    stop_reason: str | None = Field(
        None, description="why it is being stopped, or why it last was: cancel, timeout, preempt or idle"
    )
    submitted_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, job: JobRecord, full: bool = True) -> JobOut:
        """``full``: with what runs inside it; else those fields are null (see ``command``)."""
        spec = job.spec.to_dict()
        if not full:
            spec.update(dict.fromkeys(HIDDEN_FIELDS))
        return cls(
            **spec,
            cpus=job.spec.cpus,
            id=job.id,
            owner=job.owner,
            state=job.state.value,
            placements=[PlacementOut.of(p) for p in job.placements],
            reason_code=job.reason_code,
            reason=job.reason,
            exit_code=job.exit_code,
            exit_reason=job.exit_reason,
            image_digest=job.image_digest,
            run_as=job.run_as,
            array_id=job.array_id,
            array_index=job.array_index,
            usage=[UsageOut.of(u) for u in job.usage],
            restarts=job.restarts,
            starts=job.starts,
            cancel_requested=job.cancel_requested,
            stop_reason=job.stop_reason.value if job.stop_reason else None,
            submitted_at=job.submitted_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
        )


class EventOut(BaseModel):
    id: int | None = None
    time: datetime
    kind: str
    message: str
    node: str | None = None

    @classmethod
    def of(cls, e: Event) -> EventOut:
        return cls(id=e.id, time=e.time, kind=e.kind, message=e.message, node=e.node)


class WidthOut(BaseModel):
    time: datetime
    workers: int


class JobDetail(JobOut):
    events: list[EventOut] = Field(description="its newest 1,000 events, oldest first")
    events_total: int = Field(0, description="how many events it has; GET .../events pages through them")
    width: list[WidthOut] = Field(
        default_factory=list,
        description="an elastic job's width over its life: how many workers ran, at each change (empty for a gang)",
    )


class WhyOut(BaseModel):
    id: int
    state: str
    reason_code: str
    reason: str
    estimated_start: datetime | None = Field(
        None, description="from replaying running jobs' expected ends (their --max-runtime); null if unknown"
    )

"""Node request and response models."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from gpupool.domain import bounds
from gpupool.domain.records import NodeRecord
from gpupool.domain.telemetry import TelemetryPoint
from gpupool.usecases.telemetry import History


class DrainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu: int | None = Field(
        None,
        ge=0,
        le=bounds.MAX_GPU_INDEX,
        description="only this GPU (its index on the node); null for the whole node",
    )
    reason: str | None = Field(None, max_length=200, description="why, for the node's events")


class GpuOut(BaseModel):
    index: int
    uuid: str
    model: str
    memory_mib: int
    simulated: bool
    healthy: bool = Field(description="the scheduler may use it: its probe reports it healthy and it is not disabled")
    disabled: bool = Field(description="an admin took it out of service (gpupool drain NODE --gpu I)")
    jobs: list[int]


class NodeOut(BaseModel):
    name: str
    state: str
    address: str
    cpus: int
    memory_mib: int
    simulated: bool
    gpus: list[GpuOut]
    gpus_total: int
    gpus_free: int = Field(description="GPUs a new job could get now: 0 on a node that is not up")
    drain_requested: bool = Field(description="an admin drained it; a node that is down comes back drained")
    jobs: list[int] = Field(description="jobs with a live worker on the node")
    isolation: dict[str, str] = Field(
        default_factory=dict,
        description="what the node enforces around each job: users, memory, cpus, devices, kill -> the"
        " mechanism, or none (empty: the node has not said)",
    )

    @classmethod
    def of(cls, r: NodeRecord) -> NodeOut:
        n = r.node
        return cls(
            name=n.name,
            state=n.state.value,
            address=n.address,
            cpus=n.cpus,
            memory_mib=n.memory_mib,
            simulated=r.simulated,
            gpus=[
                GpuOut(
                    index=g.index,
                    uuid=g.uuid,
                    model=g.model,
                    memory_mib=g.memory_mib,
                    simulated=g.simulated,
                    healthy=g.healthy,
                    disabled=g.index in r.disabled_gpus,
                    jobs=sorted(set(r.used_gpus.get(g.index, []))),
                )
                for g in n.gpus
            ],
            gpus_total=len(n.gpus),
            gpus_free=r.gpus_free,
            drain_requested=r.drain_requested,
            jobs=list(r.jobs),
            isolation=dict(n.isolation),
        )


class TelemetryPointOut(BaseModel):
    gpu: int
    time: datetime = Field(description="the sample's time, or the start of the minute")
    samples: int = Field(description="1 for a raw sample; how many samples a minute aggregates")
    utilization_pct: float | None = Field(description="average; null where the GPU does not report it")
    utilization_max_pct: float | None
    memory_used_mib: float = Field(description="average")
    memory_total_mib: int
    temperature_c: float | None = Field(description="peak")
    power_w: float | None = Field(description="average")
    energy_j: float | None = Field(description="the energy counter (only grows) at the last sample")
    ecc_errors: int | None = Field(None, description="raw samples: volatile uncorrected ECC errors")
    xid_errors: int | None = Field(None, description="raw samples: XID errors seen since the probe started")
    power_limit_w: float | None = Field(None, description="the enforced power limit; a minute's lowest")

    @classmethod
    def of(cls, p: TelemetryPoint) -> TelemetryPointOut:
        return cls(
            gpu=p.index,
            time=p.time,
            samples=p.samples,
            utilization_pct=p.utilization_pct,
            utilization_max_pct=p.utilization_max_pct,
            memory_used_mib=p.memory_used_mib,
            memory_total_mib=p.memory_total_mib,
            temperature_c=p.temperature_c,
            power_w=p.power_w,
            energy_j=p.energy_j,
            ecc_errors=p.ecc_errors,
            xid_errors=p.xid_errors,
            power_limit_w=p.power_limit_w,
        )


class TelemetryOut(BaseModel):
    node: str
    gpu: int | None = Field(description="the GPU asked for; null: every GPU of the node")
    since: datetime
    until: datetime
    resolution: str = Field(description="raw (every sample) or minute (per-minute aggregates)")
    points: list[TelemetryPointOut] = Field(description="ordered by GPU, then time")

    @classmethod
    def of(cls, h: History) -> TelemetryOut:
        return cls(
            node=h.node,
            gpu=h.gpu,
            since=h.since,
            until=h.until,
            resolution=h.resolution.value,
            points=[TelemetryPointOut.of(p) for p in h.points],
        )

"""Node request and response models."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from gpupool.domain import bounds
from gpupool.domain.records import NodeRecord
from gpupool.domain.telemetry import TelemetryPoint
from gpupool.usecases.telemetry import History


class PowerBudgetRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    budget: str | None = Field(
        None, max_length=32, description="the node's own GPU power budget (3kW, 2500W); none or null: none"
    )


class PowerBudgetOut(BaseModel):
    node: str
    power_budget_w: float | None  # null: the node has no budget of its own


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
    power_min_w: int | None = Field(
        None, description="the lowest power limit it may be set to, in watts (null: not known)"
    )
    power_max_w: int | None = Field(None, description="the highest power limit it may be set to, in watts")
    power_default_w: int | None = Field(None, description="its default power limit, what --gpu-power max runs at")


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
                    power_min_w=g.power_min_w,
                    power_max_w=g.power_max_w,
                    power_default_w=g.power_default_w,
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


class CalibrateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bound_s: float = Field(60.0, description="seconds each GPU model's sweep may take, 5 to 600")


class PowerPointOut(BaseModel):
    kind: str = Field(description="limit (value in W) or clocks (SM clocks locked at value MHz)")
    value: int
    speed: float = Field(description="work per second, relative to the default (1)")
    energy: float = Field(description="joules per unit of work, relative to the default (1)")
    watts: float = Field(description="mean draw under compute-bound work")
    rate: float | None = Field(None, description="work per second in the result's unit (TFLOP/s on a real GPU)")
    efficient: bool = Field(False, description="the point --gpu-power efficient picks at max_slowdown")


class PowerCurveOut(BaseModel):
    """A GPU model's curve as calibration measured it, or why it was not measured (``refused``)."""

    node: str
    model: str | None
    refused: str | None = None
    gpu: int | None = Field(None, description="the GPU it was measured on")
    simulated: bool | None = None
    unit: str | None = Field(None, description="what the work is counted in: TFLOP, or work on a simulated GPU")
    default_w: int | None = None
    bound_s: float | None = None
    elapsed_s: float | None = None
    measured_at: datetime | None = None
    skipped: list[str] = Field(default_factory=list, description="settings the GPU refused, each with why")
    points: list[PowerPointOut] = Field(default_factory=list, description="the default first")
    max_slowdown: float | None = None

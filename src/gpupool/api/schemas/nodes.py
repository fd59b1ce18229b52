"""Node request and response models."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gpupool.domain.records import NodeRecord


class DrainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu: int | None = Field(None, ge=0, description="only this GPU (its index on the node); null for the whole node")
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
        )

"""Node response models."""

from __future__ import annotations

from pydantic import BaseModel

from gpupool.domain.records import NodeRecord


class GpuOut(BaseModel):
    index: int
    uuid: str
    model: str
    memory_mib: int
    simulated: bool
    healthy: bool
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
    gpus_free: int

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
                    jobs=sorted(set(r.used_gpus.get(g.index, []))),
                )
                for g in n.gpus
            ],
            gpus_total=len(n.gpus),
            gpus_free=r.gpus_free,
        )

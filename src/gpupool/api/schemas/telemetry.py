"""Telemetry response models shared across nodes: the latest reading of every GPU."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from gpupool.domain.telemetry import GpuSample


class GpuSampleOut(BaseModel):
    node: str
    gpu: int = Field(description="the GPU's index on its node")
    uuid: str
    time: datetime = Field(description="when the GPU was read")
    simulated: bool
    utilization_pct: float | None = Field(description="null where the GPU does not report it (MIG)")
    memory_used_mib: int
    memory_total_mib: int
    temperature_c: float | None
    power_w: float | None
    energy_j: float | None = Field(description="the energy counter: only grows")
    ecc_errors: int | None = Field(description="volatile uncorrected ECC errors")
    xid_errors: int | None = Field(description="XID errors seen since the probe started")
    power_limit_w: float | None = Field(None, description="the power limit the GPU enforces; null where not read")

    @classmethod
    def of(cls, s: GpuSample) -> GpuSampleOut:
        return cls(
            node=s.node,
            gpu=s.index,
            uuid=s.uuid,
            time=s.time,
            simulated=s.simulated,
            utilization_pct=s.utilization_pct,
            memory_used_mib=s.memory_used_mib,
            memory_total_mib=s.memory_total_mib,
            temperature_c=s.temperature_c,
            power_w=s.power_w,
            energy_j=s.energy_j,
            ecc_errors=s.ecc_errors,
            xid_errors=s.xid_errors,
            power_limit_w=s.power_limit_w,
        )

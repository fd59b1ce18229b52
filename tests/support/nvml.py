"""A fake NVML: the parts of ``pynvml`` the NVML probe uses, as plain functions over a table of
GPUs the test fills (what each reads, what it does not support, which XID events are pending), and
their power: each keeps its limit and locked clocks as a GPU does, within its constraints, and
``refuse`` makes every setting fail as NVML does for a caller that is not root."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_Timeout(NVMLError):
    pass


class NVMLError_NoPermission(NVMLError):
    pass


class NVMLError_InvalidArgument(NVMLError):
    pass


@dataclass
class FakeGpu:
    uuid: str
    used: int = 10 * 2**30
    total: int = 80 * 2**30
    util: int | None = 75
    temperature: int = 61
    power_mw: int = 312_500
    energy_mj: int | None = 9_000_000
    ecc: int | None = 0
    events: bool = True
    compute: dict[int, int | None] = field(default_factory=dict)  # pid -> bytes it holds (None: unknown)
    graphics: dict[int, int | None] | None = field(default_factory=dict)  # None: not supported
    min_mw: int = 200_000
    max_mw: int = 700_000
    default_mw: int | None = 700_000  # None: power management not supported
    limit_mw: int = 700_000  # the enforced limit
    clocks: tuple[int, int] | None = None  # locked SM clocks (min, max MHz); None: unlocked


@dataclass
class Namespace:
    gpu: int


@dataclass
class Event:
    device: int
    eventType: int
    eventData: int


@dataclass
class _Process:
    pid: int
    usedGpuMemory: int | None


@dataclass
class FakeNvml:
    """The parts of ``pynvml`` the probe uses. A handle is the GPU's index."""

    gpus: list[FakeGpu]
    pending: list[Event] = field(default_factory=list)
    inits: int = 0
    refuse: str | None = None  # every power setting fails with this (e.g. "Insufficient Permissions")
    settings: list[tuple[str, int, Any]] = field(default_factory=list)  # (call, GPU, value) of each setting made
    NVMLError: type[Exception] = NVMLError
    NVMLError_NotSupported: type[Exception] = NVMLError_NotSupported
    NVML_TEMPERATURE_GPU: int = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED: int = 1
    NVML_VOLATILE_ECC: int = 0
    nvmlEventTypeXidCriticalError: int = 0x8

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.inits -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetIndex(self, handle: int) -> int:
        return handle

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return self.gpus[handle].uuid.encode()

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        g = self.gpus[handle]
        return type("Memory", (), {"used": g.used, "total": g.total, "free": g.total - g.used})()

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Namespace:
        return Namespace(gpu=self._supported(self.gpus[handle].util))

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self.gpus[handle].temperature

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self.gpus[handle].power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        return self._supported(self.gpus[handle].energy_mj)

    def nvmlDeviceGetTotalEccErrors(self, handle: int, kind: int, counter: int) -> int:
        assert (kind, counter) == (self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, self.NVML_VOLATILE_ECC)
        return self._supported(self.gpus[handle].ecc)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return [_Process(pid, used) for pid, used in self.gpus[handle].compute.items()]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[Any]:
        graphics = self.gpus[handle].graphics
        if graphics is None:
            raise NVMLError_NotSupported("not supported")
        return [_Process(pid, used) for pid, used in graphics.items()]

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: int, kinds: int, event_set: str) -> None:
        assert (kinds, event_set) == (self.nvmlEventTypeXidCriticalError, "event-set")
        if not self.gpus[handle].events:
            raise NVMLError_NotSupported("events not supported")

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> Event:
        assert timeout_ms == 0, "a reading never waits for events"
        if not self.pending:
            raise NVMLError_Timeout("timeout")
        return self.pending.pop(0)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: int) -> tuple[int, int]:
        g = self.gpus[handle]
        self._supported(g.default_mw)
        return g.min_mw, g.max_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: int) -> int:
        return self._supported(self.gpus[handle].default_mw)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        g = self.gpus[handle]
        self._supported(g.default_mw)
        return g.limit_mw

    def nvmlDeviceSetPowerManagementLimit(self, handle: int, limit_mw: int) -> None:
        g = self.gpus[handle]
        self._may_set(g)
        if not g.min_mw <= limit_mw <= g.max_mw:
            raise NVMLError_InvalidArgument("Invalid Argument")
        g.limit_mw = limit_mw
        self.settings.append(("limit", handle, limit_mw))

    def nvmlDeviceSetGpuLockedClocks(self, handle: int, low_mhz: int, high_mhz: int) -> None:
        g = self.gpus[handle]
        self._may_set(g)
        g.clocks = (low_mhz, high_mhz)
        self.settings.append(("clocks", handle, (low_mhz, high_mhz)))

    def nvmlDeviceResetGpuLockedClocks(self, handle: int) -> None:
        g = self.gpus[handle]
        self._may_set(g)
        g.clocks = None
        self.settings.append(("reset clocks", handle, None))

    def _may_set(self, g: FakeGpu) -> None:
        self._supported(g.default_mw)
        if self.refuse is not None:
            raise NVMLError_NoPermission(self.refuse)

    @staticmethod
    def _supported(value: int | None) -> int:
        if value is None:
            raise NVMLError_NotSupported("not supported")
        return value

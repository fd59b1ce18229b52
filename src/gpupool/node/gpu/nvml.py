"""Real GPUs through NVML (``nvidia-ml-py``). The only module that imports ``pynvml``.

The module is injectable (``NvmlProbe(nvml=...)``) so that tests can hand it a fake NVML built
from plain functions. Sampling keeps NVML initialised between readings (an init per reading
would cost more than the reading); describing the GPUs initialises and shuts down as before.

XID errors have no "how many so far" query: NVML reports them as events. The probe registers
every GPU for ``nvmlEventTypeXidCriticalError`` once, and each reading first drains the events
that arrived since the last one (without waiting), so a sample says how many XIDs this probe
has seen on the GPU and the code of the latest. Where events cannot be registered (no
permission, not supported) the XID fields are None, as is any other reading the GPU refuses.

Power (issue 33): a GPU's range is NVML's power-management constraints and default limit; a
setting is a power limit (``nvmlDeviceSetPowerManagementLimit``, in mW) or SM clocks locked at one
frequency (``nvmlDeviceSetGpuLockedClocks``); restoring the default sets the default limit and
unlocks the clocks. Both need root: NVML's refusal reaches the caller as ``PowerRefused`` with
NVML's own words, and each reading says the limit NVML enforces, so no cap is ever only assumed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any, TypeVar

from gpupool.domain.launch import PowerSetting
from gpupool.domain.nodes import GpuInfo
from gpupool.domain.power import PowerRange
from gpupool.domain.telemetry import GpuSample
from gpupool.node.gpu.probe import PowerRefused

log = logging.getLogger("gpupool.nvml")
T = TypeVar("T")
_MAX_EVENTS_PER_READING = 1000


class NvmlProbe:
    def __init__(self, nvml: Any = None) -> None:
        self._given = nvml
        self._lock = threading.Lock()
        self._live: Any = None  # the NVML module, once initialised for sampling
        self._events: Any = None  # the XID event set, None where there is none
        self._watched: set[int] = set()  # GPUs registered for XID events
        self._xids: dict[int, tuple[int, int | None]] = {}  # index -> (XIDs seen, latest code)

    def gpus(self) -> list[GpuInfo]:
        """The machine's NVIDIA GPUs, or an empty list where there is no driver."""
        nv = self._module()
        if nv is None:
            return []
        try:
            nv.nvmlInit()
        except nv.NVMLError:
            return []
        try:
            return [_describe(nv, i) for i in range(nv.nvmlDeviceGetCount())]
        finally:
            nv.nvmlShutdown()

    def sample(self, node: str, busy: Collection[int], now: datetime) -> list[GpuSample]:
        """A reading of every GPU; a GPU that cannot be read at all (fell off the bus) is left out."""
        with self._lock:
            nv = self._open()
            if nv is None:
                return []
            try:
                count = int(nv.nvmlDeviceGetCount())
            except nv.NVMLError:
                log.warning("NVML cannot count the GPUs; no telemetry this time", exc_info=True)
                return []
            self._drain_xids(nv)
            out = []
            for index in range(count):
                try:
                    out.append(self._read(nv, node, index, now))
                except nv.NVMLError as exc:
                    log.warning("cannot read GPU %d through NVML: %s", index, exc)
            return out

    def used_by(self, pids: Collection[int]) -> dict[int, int]:
        """Per GPU, the memory the processes ``pids`` hold (compute and graphics contexts); a GPU
        that cannot say (no permission, MIG without process accounting) counts none."""
        wanted = set(pids)
        with self._lock:
            nv = self._open()
            if nv is None or not wanted:
                return {}
            used: dict[int, int] = {}
            for index in range(_optional(nv, lambda: int(nv.nvmlDeviceGetCount())) or 0):
                try:
                    handle = nv.nvmlDeviceGetHandleByIndex(index)
                    procs = [*nv.nvmlDeviceGetComputeRunningProcesses(handle)]
                    procs += _optional(nv, lambda: list(nv.nvmlDeviceGetGraphicsRunningProcesses(handle))) or []  # noqa: B023
                except nv.NVMLError as exc:
                    log.debug("cannot list the processes on GPU %d: %s", index, exc)
                    continue
                held = sum(int(p.usedGpuMemory or 0) for p in procs if int(p.pid) in wanted) // 2**20
                if held:
                    used[index] = held
            return used

    def power_range(self, index: int) -> PowerRange | None:
        """NVML's constraints and default limit of GPU ``index``; None where it has none to say."""
        with self._lock:
            nv = self._open()
            if nv is None:
                return None
            try:
                return _power_range(nv, nv.nvmlDeviceGetHandleByIndex(index))
            except nv.NVMLError:
                return None

    def apply_power(self, index: int, setting: PowerSetting | None) -> None:
        """A limit (the clocks unlocked), locked clocks (at the default limit), or the default
        (None); ``PowerRefused`` with NVML's words where the GPU or the node's rights refuse."""
        with self._lock:
            nv = self._open()
            if nv is None:
                raise PowerRefused("NVML: not available on this node")
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                if setting is not None and setting.kind == "clocks":
                    nv.nvmlDeviceSetPowerManagementLimit(handle, nv.nvmlDeviceGetPowerManagementDefaultLimit(handle))
                    nv.nvmlDeviceSetGpuLockedClocks(handle, setting.value, setting.value)
                    return
                if setting is None:
                    nv.nvmlDeviceSetPowerManagementLimit(handle, nv.nvmlDeviceGetPowerManagementDefaultLimit(handle))
                else:
                    nv.nvmlDeviceSetPowerManagementLimit(handle, setting.value * 1000)
                with contextlib.suppress(nv.NVMLError_NotSupported):  # a GPU that cannot lock clocks has none locked
                    nv.nvmlDeviceResetGpuLockedClocks(handle)
            except nv.NVMLError as exc:
                raise PowerRefused(f"NVML: {exc}") from None

    def _module(self) -> Any:
        if self._given is not None:
            return self._given
        try:
            import pynvml
        except ImportError:
            return None
        return pynvml

    def _open(self) -> Any:
        """NVML, initialised once for sampling (and XID events registered); None without a driver."""
        if self._live is not None:
            return self._live
        nv = self._module()
        if nv is None:
            return None
        try:
            nv.nvmlInit()
        except nv.NVMLError:
            return None
        self._live = nv
        try:
            self._events = nv.nvmlEventSetCreate()
        except nv.NVMLError as exc:
            log.info("XID errors will not be reported: NVML events are unavailable (%s)", exc)
            return nv
        count = _optional(nv, lambda: int(nv.nvmlDeviceGetCount()))
        for index in range(count or 0):
            try:
                nv.nvmlDeviceRegisterEvents(
                    nv.nvmlDeviceGetHandleByIndex(index), nv.nvmlEventTypeXidCriticalError, self._events
                )
            except nv.NVMLError as exc:
                log.info("XID errors of GPU %d will not be reported: %s", index, exc)
                continue
            self._watched.add(index)
            self._xids[index] = (0, None)
        return nv

    def _drain_xids(self, nv: Any) -> None:
        """Count the XID events that arrived since the last reading; never waits."""
        if self._events is None:
            return
        for _ in range(_MAX_EVENTS_PER_READING):
            try:
                event = nv.nvmlEventSetWait_v2(self._events, 0)
            except nv.NVMLError:  # a timeout: nothing (more) arrived
                return
            if not int(event.eventType) & nv.nvmlEventTypeXidCriticalError:
                continue
            device = event.device
            index = _optional(nv, lambda: int(nv.nvmlDeviceGetIndex(device)))  # noqa: B023 - called at once
            if index is not None and index in self._xids:
                count, _ = self._xids[index]
                self._xids[index] = (count + 1, int(event.eventData))

    def _read(self, nv: Any, node: str, index: int, now: datetime) -> GpuSample:
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        memory = nv.nvmlDeviceGetMemoryInfo(handle)
        xids: int | None = None
        last_xid: int | None = None
        if index in self._xids:
            xids, last_xid = self._xids[index]
        return GpuSample(
            node=node,
            index=index,
            uuid=_text(nv.nvmlDeviceGetUUID(handle)),
            time=now,
            memory_used_mib=int(memory.used) // 2**20,
            memory_total_mib=int(memory.total) // 2**20,
            simulated=False,
            utilization_pct=_optional(nv, lambda: float(nv.nvmlDeviceGetUtilizationRates(handle).gpu)),
            temperature_c=_optional(nv, lambda: float(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))),
            power_w=_optional(nv, lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0),  # mW
            energy_j=_optional(nv, lambda: nv.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0),  # mJ
            ecc_errors=_optional(
                nv,
                lambda: int(
                    nv.nvmlDeviceGetTotalEccErrors(handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)
                ),
            ),
            xid_errors=xids,
            last_xid=last_xid,
            power_limit_w=_optional(nv, lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0),  # mW
        )


def _describe(nv: Any, index: int) -> GpuInfo:
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    memory = nv.nvmlDeviceGetMemoryInfo(handle)
    power = _optional(nv, lambda: _power_range(nv, handle))
    return GpuInfo(
        index=index,
        uuid=_text(nv.nvmlDeviceGetUUID(handle)),
        model=_text(nv.nvmlDeviceGetName(handle)),
        memory_mib=int(memory.total) // 2**20,
        simulated=False,
        power_min_w=None if power is None else power.min_w,
        power_max_w=None if power is None else power.max_w,
        power_default_w=None if power is None else power.default_w,
    )


def _power_range(nv: Any, handle: Any) -> PowerRange:
    low_mw, high_mw = nv.nvmlDeviceGetPowerManagementLimitConstraints(handle)
    default_mw = nv.nvmlDeviceGetPowerManagementDefaultLimit(handle)
    return PowerRange(round(low_mw / 1000), round(high_mw / 1000), round(default_mw / 1000))


def _optional(nv: Any, read: Callable[[], T]) -> T | None:
    """A reading the GPU may not offer (NotSupported under MIG or on older boards, NoPermission)."""
    try:
        return read()
    except nv.NVMLError:
        return None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

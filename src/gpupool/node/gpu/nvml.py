"""Real GPUs through NVML (``nvidia-ml-py``). The only module that imports ``pynvml``."""

from __future__ import annotations

from gpupool.domain.nodes import GpuInfo


class NvmlProbe:
    def gpus(self) -> list[GpuInfo]:
        """The machine's NVIDIA GPUs, or an empty list where there is no driver."""
        try:
            import pynvml
        except ImportError:
            return []
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:
            return []
        try:
            return [self._describe(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())]
        finally:
            pynvml.nvmlShutdown()

    @staticmethod
    def _describe(pynvml: object, index: int) -> GpuInfo:
        nv = pynvml
        handle = nv.nvmlDeviceGetHandleByIndex(index)  # type: ignore[attr-defined]
        name = nv.nvmlDeviceGetName(handle)  # type: ignore[attr-defined]
        memory = nv.nvmlDeviceGetMemoryInfo(handle)  # type: ignore[attr-defined]
        return GpuInfo(
            index=index,
            uuid=_text(nv.nvmlDeviceGetUUID(handle)),  # type: ignore[attr-defined]
            model=_text(name),
            memory_mib=int(memory.total) // 2**20,
            simulated=False,
        )


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

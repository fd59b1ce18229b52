"""What one worker of a job needs on one node."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupool.domain.jobs import JobSpec
from gpupool.domain.resources import CPU_MILLI, fraction_steps, is_fractional, show_cpus


@dataclass(frozen=True, slots=True)
class WorkerDemand:
    whole_gpus: int
    share: int  # thousandths of one GPU, for a fractional worker; else 0
    cpu_milli: int  # whole cores (a multiple of 1000) are pinned; a fraction shares unpinned cores
    memory_mib: int
    models: frozenset[str] | None  # allowed GPU models, None for any
    gpu_memory_mib: int = 0  # share: memory needed on the shared GPU; whole: least memory per GPU
    # Hashed once: demands key the cycle's memos (failed shapes, explanations), looked up for
    # every waiting job, and a dataclass hashes its fields in Python at every look-up.
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fields = (self.whole_gpus, self.share, self.cpu_milli, self.memory_mib, self.models, self.gpu_memory_mib)
        object.__setattr__(self, "_hash", hash(fields))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def of(cls, spec: JobSpec) -> WorkerDemand:
        models = frozenset(m.strip() for m in spec.gpu_model.split("|") if m.strip()) if spec.gpu_model else None
        if is_fractional(spec.gpus):
            return cls(0, fraction_steps(spec.gpus), spec.cpu_milli, spec.memory_mib, models, spec.gpu_memory_mib)
        return cls(int(spec.gpus), 0, spec.cpu_milli, spec.memory_mib, models, spec.gpu_memory_mib)

    @property
    def pinned_cores(self) -> int:
        """Cores pinned to the worker: its whole-core request; 0 for a fraction of a core."""
        return 0 if self.cpu_milli % CPU_MILLI else self.cpu_milli // CPU_MILLI

    def describe_cpus(self) -> str:
        return f"{show_cpus(self.cpu_milli)} CPU core" + ("" if self.cpu_milli == CPU_MILLI else "s")

    @property
    def needs_gpu(self) -> bool:
        return self.whole_gpus > 0 or self.share > 0

    def describe_gpus(self) -> str:
        if self.share:
            return f"{self.share / 1000:g} of a GPU"
        return f"{self.whole_gpus} GPU" + ("" if self.whole_gpus == 1 else "s")

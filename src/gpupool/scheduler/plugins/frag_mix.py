"""The typical mix of workers that ``frag`` measures a node against: the shapes that make most
of the workers a pool runs, weighted by how common each is.

FGD measured against the typical pods of the trace it replayed; ``frag`` on a live head learns
the mix from the pool's own jobs, running and waiting (``frag.for_pool``), so a pool of 8-GPU
jobs with one core each is not measured against Alibaba's shares with 3 to 12 cores. openb's mix
is kept for callers with no pool to learn from.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpupool.domain.resources import GPU_FRACTION_STEPS
from gpupool.scheduler.demand import WorkerDemand

MILLI = GPU_FRACTION_STEPS
Shape = tuple[int, int, int, frozenset[str] | None]  # (CPU millicores, GPUs, thousandths each, models)


# The typical mix of the Alibaba openb default pod list (FGD's rule: the most common shapes that
# make 95 % of its 8,152 pods): (CPU millicores, GPUs, GPU thousandths each, pods).
OPENB_MIX = (
    (3152, 1, 810, 1047),
    (11300, 1, 1000, 874),
    (11400, 1, 1000, 599),
    (3152, 1, 1000, 470),
    (11908, 1, 470, 388),
    (12500, 0, 0, 366),
    (8000, 1, 470, 360),
    (12000, 1, 1000, 326),
    (32000, 0, 0, 290),
    (18708, 1, 1000, 255),
    (11908, 1, 650, 237),
    (4000, 1, 320, 232),
    (9810, 1, 1000, 195),
    (8000, 0, 0, 185),
    (8000, 1, 1000, 164),
    (4000, 1, 1000, 159),
    (15700, 1, 1000, 158),
    (11908, 1, 1000, 153),
    (16000, 1, 1000, 150),
    (4000, 1, 230, 122),
    (6000, 1, 460, 120),
    (15400, 0, 0, 120),
    (16500, 0, 0, 95),
    (14200, 1, 1000, 93),
    (24200, 1, 1000, 84),
    (3152, 1, 590, 75),
    (4152, 1, 550, 72),
    (8000, 1, 320, 72),
    (11900, 1, 1000, 55),
    (4000, 1, 160, 54),
    (4152, 1, 370, 45),
    (4000, 1, 220, 43),
    (8200, 1, 1000, 41),
    (15200, 1, 1000, 36),
    (4152, 1, 810, 31),
)


@dataclass(frozen=True, slots=True)
class PodShape:
    """One shape of the typical mix: ``gpus`` GPUs of ``milli`` thousandths each (1 GPU and less
    than 1000 for a share, 0 GPUs for CPU-only work), CPU millicores, how common it is."""

    cpu_milli: int
    gpus: int
    milli: int
    models: frozenset[str] | None
    weight: float


class Mix:
    """The typical workers a node's fragmentation is measured against; weights sum to 1. Equal
    mixes have equal ``shapes``, which key a pool's placement (``frag.for_pool``)."""

    def __init__(self, shapes: Iterable[PodShape]) -> None:
        listed = [s for s in shapes if s.weight > 0]
        total = sum(s.weight for s in listed) or 1.0
        self.shapes = tuple(PodShape(s.cpu_milli, s.gpus, s.milli, s.models, s.weight / total) for s in listed)
        self.constrained = any(s.models is not None for s in self.shapes)
        # (thousandths per GPU, CPU millicores per GPU, weight) of the GPU shapes, what a room may take.
        self.fillers = tuple((s.milli, s.cpu_milli // max(s.gpus, 1), s.weight) for s in self.shapes if s.milli)
        # GPU thousandths per CPU millicore the mix's GPU workers ask for, on average; None where
        # they ask no CPUs (then no GPU is short of CPUs).
        gpu = [s for s in self.shapes if s.milli]
        cpus = sum(s.weight * s.cpu_milli for s in gpu)
        self.gpu_per_cpu = sum(s.weight * s.gpus * s.milli for s in gpu) / cpus if cpus else None

    def distance(self, other: Mix) -> float:
        """How far apart two mixes are: the share of workers whose shape one has and the other
        not (total variation, 0 to 1)."""
        mine = {_shape(s): s.weight for s in self.shapes}
        theirs = {_shape(s): s.weight for s in other.shapes}
        return sum(abs(mine.get(k, 0.0) - theirs.get(k, 0.0)) for k in mine.keys() | theirs.keys()) / 2

    @classmethod
    def typical(cls, demands: Iterable[WorkerDemand], popularity: float = 0.95) -> Mix:
        """FGD's typical pods: the most common shapes (CPU-only ones included) that together make
        ``popularity`` of all, weighted by their counts."""
        return cls.of_counts(Counter(shape_of(d) for d in demands), popularity)

    @classmethod
    def of_counts(cls, counts: Mapping[Shape, int], popularity: float = 0.95, resolution: int = 0) -> Mix:
        """``typical`` from counts of shapes. With a ``resolution``, weights are rounded to that
        many parts of the whole and shapes that round to nothing dropped: a pool whose jobs come
        and go then keeps the same mix, equal to the last one, from cycle to cycle."""
        total = sum(counts.values())
        chosen: list[PodShape] = []
        covered = 0
        for (cpus, gpus, milli, models), n in sorted(counts.items(), key=_commonest):
            if total and covered >= popularity * total:
                break
            weight = round(n * resolution / total) if resolution else n
            if weight:
                chosen.append(PodShape(cpus, gpus, milli, models, float(weight)))
            covered += n
        return cls(chosen)

    @classmethod
    def openb(cls) -> Mix:
        return cls(PodShape(m, g, milli, None, float(n)) for m, g, milli, n in OPENB_MIX)


def shape_of(demand: WorkerDemand) -> Shape:
    """(CPU millicores, GPUs, thousandths of each, models): a share is 1 GPU of less than 1000."""
    if demand.share:
        return (demand.cpu_milli, 1, demand.share, demand.models)
    return (demand.cpu_milli, demand.whole_gpus, MILLI if demand.whole_gpus else 0, demand.models)


def _commonest(item: tuple[Shape, int]) -> tuple[int, int, int, int]:
    (cpus, gpus, milli, _), n = item
    return (-n, cpus, gpus, milli)


def _shape(shape: PodShape) -> Shape:
    return (shape.cpu_milli, shape.gpus, shape.milli, shape.models)

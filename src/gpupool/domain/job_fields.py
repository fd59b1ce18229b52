"""The check of a submission, apart from the ``JobSpec`` it makes: the fields ``JobSpec.create``
takes, validated and normalised, as plain values.

``JobSpec.create`` is ``JobSpec(**checked(...))``: one rule for the API, the CLI, trace loaders and
tests. ``gpupool submit`` checks here before it sends and posts ``submission_body(checked(...))``,
the same body ``JobSpec.submission()`` gives, without making a JobSpec: defining a dataclass loads
``dataclasses`` and ``inspect`` (~10 ms of each submission's start, a script submitting in a loop
pays it every time). ``tests/domain/test_job_fields.py`` holds the two to the same answers.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpupool.domain import bounds
from gpupool.domain.elastic import parse_workers
from gpupool.domain.errors import InvalidInput
from gpupool.domain.names import NAME_RE
from gpupool.domain.resources import CPU_MILLI, parse_cpus, validate_gpus

# JobSpec's fields in their order (tests/domain/test_job_fields.py checks it against the dataclass).
FIELD_ORDER = (
    "command", "name", "project", "gpus", "workers", "cpu_milli", "memory_mib", "priority", "max_restarts",
    "env", "workdir", "gpu_model", "max_runtime_s", "gpu_memory_mib", "checkpoint_dir", "service", "port_env",
    "expose", "image", "gpu_power", "max_workers",
)  # fmt: skip


class Priority(enum.StrEnum):
    """Priority classes, DESIGN §3. ``rank``: larger runs first."""

    TRAIN = "train"
    INTERACTIVE = "interactive"
    INFERENCE = "inference"

    @property
    def rank(self) -> int:
        return _PRIORITY_RANK[self]

    @classmethod
    def parse(cls, value: str) -> Priority:
        try:
            return cls(value)
        except ValueError:
            names = "|".join(p.value for p in cls)
            raise InvalidInput(f"unknown priority {value!r}: use one of {names}") from None


_PRIORITY_RANK = {Priority.TRAIN: 0, Priority.INTERACTIVE: 1, Priority.INFERENCE: 2}
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def checked(
    *,
    command: Sequence[str],
    name: str | None = None,
    project: str | None = None,
    gpus: float = 1.0,
    workers: int | str = 1,
    cpus: float | str = 0,
    memory: str | int | None = None,
    priority: str = "train",
    max_restarts: int = 0,
    env: Mapping[str, str] | None = None,
    workdir: str | None = None,
    gpu_model: str | None = None,
    max_runtime_s: int | None = None,
    gpu_memory: str | int | None = None,
    checkpoint_dir: str | None = None,
    expose: int | None = None,
    image: str | None = None,
    gpu_power: str | None = None,
    max_workers: int | None = None,
) -> dict[str, Any]:
    """The fields of the JobSpec these ask for (``JobSpec(**checked(...))``); ``InvalidInput``
    with the reason for the first that is wrong."""
    # Only making a spec checks one: reading jobs (the CLI's listings) does not load the checks
    # and what they import (power, launch, images: ~16 ms of a command's start).
    from gpupool.domain import job_checks

    argv = job_checks.command(command, image)
    gpus = validate_gpus(gpus)
    if gpus > bounds.MAX_GPUS_PER_WORKER:
        raise InvalidInput(f"gpus per worker must be at most {bounds.MAX_GPUS_PER_WORKER}, got {gpus:g}")
    gpu_memory_mib = job_checks.memory("gpu memory", gpu_memory)
    if gpu_memory_mib and gpus == 0:
        raise InvalidInput("--gpu-memory needs GPUs: it is the GPU memory a (fractional) GPU must offer")
    workers, max_workers = parse_workers(workers, max_workers)
    if max(workers, max_workers or 0) > 1 and 0 < gpus < 1:
        what = "an elastic job" if max_workers else "a multi-worker job"
        raise InvalidInput(f"{what} needs whole GPUs per worker (fractions are for one worker)")
    cpu_milli = parse_cpus(cpus, bounds.MAX_CPUS_PER_WORKER)
    bounds.whole("max-restarts", max_restarts, 0, bounds.MAX_RESTARTS)
    if max_runtime_s is not None:
        bounds.whole("max runtime (seconds)", max_runtime_s, 1, bounds.MAX_RUNTIME_S)
    project = project or "default"
    if not NAME_RE.match(project):
        raise InvalidInput(f"invalid project name {project!r}: letters, digits, '.', '_' and '-'")
    name = bounds.readable("the job name", name or job_checks.default_name(argv, image), 128)
    clean_env = dict(env or {})
    for key in clean_env:
        if not _ENV_KEY_RE.match(key):
            raise InvalidInput(f"invalid environment variable name {bounds.shown(key)}: use K=V with K like MY_VAR")
    bounds.environment(clean_env)
    job_checks.check_workdir(workdir)
    if gpu_model is not None:
        bounds.readable("the GPU model", gpu_model, bounds.MAX_MODEL)
    checkpoint_dir = job_checks.checkpoint_dir(checkpoint_dir, workdir)
    if expose is not None:
        bounds.whole("expose (a port)", expose, 1, 65535)
    return dict(
        command=argv,
        name=name,
        project=project,
        gpus=gpus,
        workers=workers,
        cpu_milli=cpu_milli,
        memory_mib=job_checks.memory("memory", memory),
        priority=Priority.parse(priority),
        max_restarts=max_restarts,
        env=clean_env,
        workdir=workdir,
        gpu_model=gpu_model or None,
        max_runtime_s=max_runtime_s,
        gpu_memory_mib=gpu_memory_mib,
        checkpoint_dir=checkpoint_dir,
        expose=expose,
        image=image,
        gpu_power=job_checks.gpu_power(gpu_power, gpus),
        max_workers=max_workers,
    )


def submission_body(values: Mapping[str, Any]) -> dict[str, Any]:
    """The body of ``POST /api/v1/jobs`` that asks for exactly the spec of ``values`` (a JobSpec's
    fields): the keyword arguments of ``create`` (memory as MiB numbers), leaving out what is unset."""
    body: dict[str, Any] = {}
    for name in FIELD_ORDER:
        value = values.get(name)
        if isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, enum.Enum):
            value = value.value
        elif isinstance(value, Mapping):
            value = dict(value)
        body[name] = value
    body["memory"] = body.pop("memory_mib") or None
    body["gpu_memory"] = body.pop("gpu_memory_mib") or None
    milli = body.pop("cpu_milli")
    body["cpus"] = milli // CPU_MILLI if milli % CPU_MILLI == 0 else f"{milli}m"
    return {k: v for k, v in body.items() if v is not None}

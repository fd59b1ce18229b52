"""Jobs: what a user asks for (``JobSpec``) and where its workers run (``Placement``).

``JobSpec.create`` is the one place a submission is validated, so the API, the CLI, trace
loaders and tests reject the same inputs with the same messages.
"""

from __future__ import annotations

import enum
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpupool.domain.errors import InvalidInput
from gpupool.domain.resources import parse_memory, validate_gpus


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


class JobState(enum.StrEnum):
    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    LOST = "lost"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES

    @property
    def active(self) -> bool:
        """Holds (or is about to hold) resources on nodes."""
        return self in (JobState.STARTING, JobState.RUNNING)


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
# Not finished: what `gpupool jobs` lists and what keeps a project from being deleted.
ACTIVE_JOB_STATES = tuple(s.value for s in JobState if s not in TERMINAL_STATES)

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_WORKERS = 4096


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What was asked for. ``gpus``, ``cpus`` and ``memory_mib`` are per worker."""

    command: tuple[str, ...]
    name: str = ""
    project: str = "default"
    gpus: float = 1.0
    workers: int = 1
    cpus: int = 0
    memory_mib: int = 0
    priority: Priority = Priority.TRAIN
    max_restarts: int = 0
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str | None = None
    gpu_model: str | None = None
    max_runtime_s: int | None = None
    gpu_memory_mib: int = 0  # fraction: memory it needs on the shared GPU; whole: least memory per GPU
    # Absolute; every worker gets it as GPUPOOL_CHECKPOINT_DIR. The job owns it: gpupool neither
    # creates it nor touches what is in it.
    checkpoint_dir: str | None = None

    @property
    def total_gpus(self) -> float:
        return self.gpus * self.workers

    @property
    def quota_bound(self) -> bool:
        """interactive and inference run only inside their project's quota (DESIGN §3)."""
        return self.priority is not Priority.TRAIN

    @classmethod
    def create(  # noqa: C901 - a flat list of independent checks reads best as one
        cls,
        *,
        command: Sequence[str],
        name: str | None = None,
        project: str | None = None,
        gpus: float = 1.0,
        workers: int = 1,
        cpus: int = 0,
        memory: str | int | None = None,
        priority: str = "train",
        max_restarts: int = 0,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        gpu_model: str | None = None,
        max_runtime_s: int | None = None,
        gpu_memory: str | int | None = None,
        checkpoint_dir: str | None = None,
    ) -> JobSpec:
        argv = tuple(command)
        if not argv or not argv[0].strip():
            raise InvalidInput("empty command: give the command after --, e.g. gpupool submit -- python train.py")
        if any("\x00" in a for a in argv):
            raise InvalidInput("command arguments must not contain NUL bytes")
        gpus = validate_gpus(gpus)
        gpu_memory_mib = parse_memory(gpu_memory)
        if gpu_memory_mib and gpus == 0:
            raise InvalidInput("--gpu-memory needs GPUs: it is the GPU memory a (fractional) GPU must offer")
        if not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= MAX_WORKERS:
            raise InvalidInput(f"workers must be a whole number from 1 to {MAX_WORKERS}, got {workers!r}")
        if workers > 1 and 0 < gpus < 1:
            raise InvalidInput("a multi-worker job needs whole GPUs per worker (fractions are for one worker)")
        if not isinstance(cpus, int) or isinstance(cpus, bool) or cpus < 0:
            raise InvalidInput(f"cpus must be a whole number >= 0, got {cpus!r}")
        if not isinstance(max_restarts, int) or isinstance(max_restarts, bool) or max_restarts < 0:
            raise InvalidInput(f"max-restarts must be a whole number >= 0, got {max_restarts!r}")
        if max_runtime_s is not None and max_runtime_s <= 0:
            raise InvalidInput(f"max runtime must be positive, got {max_runtime_s}")
        project = project or "default"
        if not _NAME_RE.match(project):
            raise InvalidInput(f"invalid project name {project!r}: letters, digits, '.', '_' and '-'")
        name = name or _default_name(argv)
        if len(name) > 128:
            raise InvalidInput("job name is longer than 128 characters")
        clean_env = dict(env or {})
        for key in clean_env:
            if not _ENV_KEY_RE.match(key):
                raise InvalidInput(f"invalid environment variable name {key!r}: use K=V with K like MY_VAR")
        checkpoint_dir = _checkpoint_dir(checkpoint_dir, workdir)
        return cls(
            command=argv,
            name=name,
            project=project,
            gpus=gpus,
            workers=workers,
            cpus=cpus,
            memory_mib=parse_memory(memory),
            priority=Priority.parse(priority),
            max_restarts=max_restarts,
            env=clean_env,
            workdir=workdir,
            gpu_model=gpu_model or None,
            max_runtime_s=max_runtime_s,
            gpu_memory_mib=gpu_memory_mib,
            checkpoint_dir=checkpoint_dir,
        )


MAX_PATH = 4096


def _checkpoint_dir(path: str | None, workdir: str | None) -> str | None:
    """An absolute, normalised path; a relative one is taken from the job's (absolute) workdir."""
    if path is None:
        return None
    if not isinstance(path, str) or not path.strip():
        raise InvalidInput("checkpoint dir must be a non-empty path, e.g. /data/ckpt/run1")
    if "\x00" in path:
        raise InvalidInput("checkpoint dir must not contain NUL bytes")
    if path.startswith("~"):
        raise InvalidInput(f"checkpoint dir {path!r}: '~' is not expanded here; give an absolute path")
    if not posixpath.isabs(path):
        if not workdir or not posixpath.isabs(workdir):
            raise InvalidInput(
                f"checkpoint dir {path!r} is relative and the job has no absolute workdir to take it from; "
                "give an absolute path"
            )
        path = posixpath.join(workdir, path)
    path = posixpath.normpath(path)
    if path.startswith("//"):  # normpath keeps a leading '//' (POSIX leaves its meaning open)
        path = "/" + path.lstrip("/")
    if len(path) > MAX_PATH:
        raise InvalidInput(f"checkpoint dir is longer than {MAX_PATH} characters")
    return path


def _default_name(argv: tuple[str, ...]) -> str:
    base = argv[0].rsplit("/", 1)[-1]
    if base.startswith("python") and len(argv) > 1 and not argv[1].startswith("-"):
        base = argv[1].rsplit("/", 1)[-1]
    return base[:64] or "job"


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one worker of a job runs: a node, GPU indices on it, CPU cores on it."""

    worker: int
    node: str
    gpus: tuple[int, ...]
    gpu_share: float = 0.0  # > 0 only for a fractional worker: its share of gpus[0]
    gpu_memory_mib: int = 0  # a fractional worker's part of gpus[0]'s memory
    cpus: tuple[int, ...] = ()
    memory_mib: int = 0

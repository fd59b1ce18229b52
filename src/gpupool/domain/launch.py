"""The executor contract: what the head asks a node to run and what it hears back.

The controller decides and a node's runtime does; these are the words they share, so the
controller, the executors and the node import them from here and the controller never imports
the node (``tests/architecture/test_layers.py``). A worker's GPUs travel as a field, the node's own
indices: the node alone writes ``CUDA_VISIBLE_DEVICES`` when it starts the worker (renumbered
where it walls device files), so nothing is flattened into the environment and parsed back.

Standard library only, and no other gpupool module: the supervisor (``node/cgroups.py``) builds
``Stats`` and runs on the standard library alone.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class PowerSetting:
    """What a node sets on a job's GPU (issue 33, ``domain/power.py``): a power limit in watts, or
    the SM clocks locked at ``value`` MHz. The GPU's default is restored when the worker ends."""

    kind: Literal["limit", "clocks"]
    value: int

    @property
    def text(self) -> str:
        return f"{self.value} W limit" if self.kind == "limit" else f"SM clocks locked at {self.value} MHz"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> PowerSetting | None:
        if not data:
            return None
        kind = str(data["kind"])
        if kind not in ("limit", "clocks"):
            raise ValueError(f"unknown power setting {kind!r}")
        return cls(kind, int(data["value"]))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class RegistryAuth:
    """One owner's credentials for one registry, as a launch carries them to the node's pull.
    ``owner`` (the gpupool user) keeps what it pulled apart in the node's cache."""

    owner: str
    registry: str
    username: str
    secret: str = field(repr=False)  # never in a log line, an event or a repr

    def auth_entry(self) -> dict[str, dict[str, str]]:
        """The ``auths`` entry of a containers-auth.json (skopeo's ``--authfile``) for it."""
        pair = base64.b64encode(f"{self.username}:{self.secret}".encode()).decode()
        return {self.registry: {"auth": pair}}


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    job_id: int
    attempt: int
    worker: int
    argv: tuple[str, ...]
    env: Mapping[str, str]  # gpupool's variables and the job's own, not its GPUs (``gpus``)
    workdir: str | None
    cpus: tuple[int, ...]
    gpus: tuple[int, ...]  # the node's own indices of the worker's GPUs (empty: none)
    memory_mib: int
    grace_s: float
    header: str
    run_as: str | None = None  # the job's Unix account, fixed at submit; None: the runtime's own user
    gpu_share: float = 0.0  # its part of its one GPU, when it shares one (0: whole GPUs, or none)
    gpu_memory_mib: int = 0  # with a share: the GPU memory it asked for (0: its share of the GPU's)
    cpu_milli: int = 0  # a fraction of a core: its millicores on the shared ``cpus`` (0: ``cpus`` pinned)
    # Root or an account below the machine's UID_MIN: refused unless the head allows it (gpupool up
    # --allow-system-accounts, or the built-in admin's own jobs, which run as the head's account).
    allow_system_account: bool = False
    port: int | None = None  # the port it serves (a replica's, a published one): its job's alone
    # An OCI image to run it in (domain/images.py's forms); the node gets and unpacks it, then starts
    # the worker in its root inside the same walls. An empty ``argv``: the image's Entrypoint and Cmd.
    image: str | None = None
    # The job owner's login to the image's registry (gpupool login --registry), for the node's pull
    # alone: written to root's files only, never into the worker's environment or its files.
    registry_auth: RegistryAuth | None = field(default=None, repr=False)
    # Whole GPUs only: the power limit or clock lock the node sets on ``gpus`` while the worker runs
    # (issue 33); None: the GPU's default. A GPU shared by several workers takes the highest.
    gpu_power: PowerSetting | None = None


@dataclass(frozen=True, slots=True)
class WorkerExit:
    """How a worker ended. ``lost``: its supervisor vanished without recording an exit."""

    exit_code: int | None
    lost: bool = False
    reason: str | None = None  # what the node knows of why: "oom" (its cgroup's memory limit)
    note: str | None = None  # the node's sentence on why, where it has one (an image it could not use)
    image_digest: str | None = None  # the image's manifest digest it ran in ("sha256:..."), with an image


@dataclass(frozen=True, slots=True)
class WorkerHandle:
    """What a node needs to find a worker it launched again, in this process or after a restart:
    kept in the store, so a restarted head hands it back and re-adopts the worker.

    ``pid``: its supervisor's (0: a detached one still starting; the node reads it from the run
    directory). With a GPU share: the GPU and the memory the node's watch holds it to. With a
    port it serves: its job and that port, walled again by a restarted head's node. ``power_note``:
    what the node did with its GPUs' power at launch (issue 33), for the job's events; None: nothing
    to say (its GPUs at their default, as before).
    """

    pid: int
    run_dir: str
    gpu: int | None = None
    gpu_limit_mib: int = 0
    job: int | None = None
    port: int | None = None
    power_note: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The stored form: the keys heads have always written, only those that say something,
        so a head of either version reads what the other wrote."""
        out: dict[str, Any] = {"pid": self.pid, "run_dir": self.run_dir}
        if self.gpu_limit_mib:
            out.update(gpu=self.gpu, gpu_limit_mib=self.gpu_limit_mib)
        if self.port:
            out.update(job=self.job, port=self.port)
        if self.power_note is not None:
            out["power_note"] = self.power_note
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkerHandle:
        gpu, job, port = data.get("gpu"), data.get("job"), data.get("port")
        return cls(
            pid=int(data["pid"]),
            run_dir=str(data["run_dir"]),
            gpu=None if gpu is None else int(gpu),
            gpu_limit_mib=int(data.get("gpu_limit_mib") or 0),
            job=None if job is None else int(job),
            port=int(port) if port else None,
            power_note=None if data.get("power_note") is None else str(data["power_note"]),
        )


@dataclass(frozen=True)
class Stats:
    """A usage reading: what a whole worker group uses, its descendants included; ``None`` where
    the node does not measure it."""

    memory_bytes: int | None
    memory_peak_bytes: int | None
    cpu_seconds: float | None


@dataclass(frozen=True, slots=True)
class ImagePhase:
    """Where a worker's supervisor is with its image (issue 32): the last thing it said ("pulling
    image ...", "unpacking layer 2/5 (120 MB)", "running in image REF (sha256:...)"), and the
    digest once it has the image. The head turns each new one into an event of the job."""

    line: str
    digest: str | None = None

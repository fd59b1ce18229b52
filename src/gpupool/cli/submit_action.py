"""What ``gpupool submit`` does, with the declaration's parameters (declared in cli/jobs.py). A
module of its own: a script submitting in a loop starts the CLI for each job, and submitting
needs the job's checks and the client, not the listings' tables and array lookups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpupool.cli.common import Output, client, console, env_pairs, print_json
from gpupool.domain.durations import parse_duration
from gpupool.domain.errors import InvalidInput
from gpupool.domain.job_fields import checked, submission_body


def submit(
    command: list[str] | None = None,
    name: str | None = None,
    project: str | None = None,
    gpus: float = 1.0,
    workers: str = "1",
    cpus: str = "0",
    memory: str | None = None,
    priority: str = "train",
    max_restarts: int = 0,
    env: list[str] | None = None,
    workdir: str | None = None,
    gpu_model: str | None = None,
    max_runtime: str | None = None,
    gpu_memory: str | None = None,
    checkpoint_dir: str | None = None,
    idempotency_key: str | None = None,
    array: str | None = None,
    expose: int | None = None,
    image: str | None = None,
    gpu_power: str | None = None,
    url: str = "http://127.0.0.1:7070",
    output: Output = Output.TABLE,
) -> None:
    """What ``gpupool submit`` does (declared in cli/jobs.py)."""
    if not command and image is None:
        raise InvalidInput("empty command: give the command after --, e.g. gpupool submit --gpus 1 -- python train.py")
    env_map = env_pairs(env)
    spec = checked(
        command=list(command or []),
        name=name,
        project=project,
        gpus=gpus,
        workers=workers,
        cpus=cpus,
        memory=memory,
        priority=priority,
        max_restarts=max_restarts,
        env=env_map,
        workdir=str(Path(workdir or ".").resolve()),
        gpu_model=gpu_model,
        max_runtime_s=int(parse_duration(max_runtime)) if max_runtime else None,
        gpu_memory=gpu_memory,
        checkpoint_dir=str(Path(checkpoint_dir).expanduser().resolve()) if checkpoint_dir else checkpoint_dir,
        expose=expose,
        image=image,
        gpu_power=gpu_power,
    )
    body = submission_body(spec)  # what JobSpec.create(...).submission() gives, without the dataclass
    if array is not None:
        from gpupool.domain.arrays import ArraySpec

        ArraySpec.parse(array)  # refused here, before anything is sent
        with client(url) as c:
            made = c.submit_array(body, array, idempotency_key=idempotency_key)
        if output is Output.JSON:
            print_json(made)
            return
        console.print(
            f"submitted array {made['id']} ({made['name']}) to project {made['project']}: {made['tasks']} tasks of "
            f"{_asked_workers(spec)} × {spec['gpus']:g} GPU; see it with gpupool show {made['id']}"
        )
        print(made["id"])
        return
    with client(url) as c:
        job = c.submit(idempotency_key=idempotency_key, **body)
    if output is Output.JSON:
        print_json(job)
        return
    console.print(
        f"submitted job {job['id']} ({job['name']}) to project {job['project']}: "
        f"{_asked_workers(job)} × {job['gpus']:g} GPU; follow it with gpupool logs {job['id']} --follow"
    )
    print(job["id"])


def _asked_workers(job: dict[str, Any]) -> str:
    """The workers it asked for, as ``--workers`` takes them: ``4``, or ``2:8`` for an elastic job."""
    return f"{job['workers']}:{job['max_workers']}" if job.get("max_workers") else str(job["workers"])

"""What the job commands do: submit, jobs, show, logs, cancel, wait, why. Their options are
declared once, in ``cli/jobs.py`` (Typer: help, errors, the docs' reference); these functions
take the parsed values under the same names and import neither Typer nor Rich's parser, so the
fast path (``cli/fastpath.py``) can run them without loading either."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from gpupool.cli import arrays as array_cli
from gpupool.cli.common import Output, client, console, err_console, print_json
from gpupool.cli.outcome import Exit
from gpupool.cli.render import events_table, job_detail, jobs_table, rows_table, state_text, until
from gpupool.client.errors import ClientError
from gpupool.domain.arrays import ArraySpec
from gpupool.domain.durations import parse_duration
from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import TERMINAL_STATES, JobSpec, JobState

TERMINAL = tuple(state.value for state in TERMINAL_STATES)


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
    env_map: dict[str, str] = {}
    for item in env or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidInput(f"--env {item!r} is not K=V")
        env_map[key] = value
    spec = JobSpec.create(
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
    if array is not None:
        ArraySpec.parse(array)  # refused here, before anything is sent
        with client(url) as c:
            made = c.submit_array(spec, array, idempotency_key=idempotency_key)
        if output is Output.JSON:
            print_json(made)
            return
        console.print(
            f"submitted array {made['id']} ({made['name']}) to project {made['project']}: {made['tasks']} tasks of "
            f"{spec.workers_text} × {spec.gpus:g} GPU; see it with gpupool show {made['id']}"
        )
        print(made["id"])
        return
    with client(url) as c:
        job = c.submit(spec, idempotency_key=idempotency_key)
    if output is Output.JSON:
        print_json(job)
        return
    console.print(
        f"submitted job {job['id']} ({job['name']}) to project {job['project']}: "
        f"{_asked_workers(job)} × {job['gpus']:g} GPU; follow it with gpupool logs {job['id']} --follow"
    )
    print(job["id"])


def jobs(
    all: bool = False,
    limit: int = 1000,
    user: str | None = None,
    mine: bool = False,
    expand: bool = False,
    url: str = "http://127.0.0.1:7070",
    output: Output = Output.TABLE,
) -> None:
    """What ``gpupool jobs`` does (declared in cli/jobs.py)."""
    if mine and user is not None:
        raise InvalidInput("give --user or --mine, not both")
    folded = not expand and output is not Output.JSON  # -o json lists every task, as it always did
    arrays: list[dict[str, Any]] = []
    with client(url) as c:
        if mine:
            user = str(c.whoami()["user"])  # the head knows whose token this is
        listing, total = c.jobs_page(include_finished=all, limit=limit, user=user, tasks=not folded)
        if folded:
            arrays = c.arrays_page(include_finished=all, limit=limit, user=user)[0]
    if output is Output.JSON:
        print_json(listing)
    elif folded and (listing or arrays):
        console.print(rows_table(array_cli.table_rows(listing, arrays)))
    elif not listing:
        whose = "" if user is None else f" of {user}"
        console.print(
            f"no jobs{whose}" + ("" if all else " pending or running (gpupool jobs --all shows finished ones)")
        )
    else:
        console.print(jobs_table(listing))
    if total > len(listing):
        err_console.print(f"showing the newest {len(listing)} of {total} jobs; pass --limit {total} to see all")


def show(
    job_id: str,
    url: str = "http://127.0.0.1:7070",
    output: Output = Output.TABLE,
) -> None:
    """What ``gpupool show`` does (declared in cli/jobs.py)."""
    with client(url) as c:
        job, array = array_cli.resolve(c, job_id)
    if array is not None:
        if output is Output.JSON:
            print_json(array)
        else:
            for line in array_cli.summary_lines(array):
                console.print(line)
        return
    assert job is not None
    if output is Output.JSON:
        print_json(job)
        return
    console.print(job_detail(job))
    console.print(events_table(job["events"]))
    if job.get("events_total", 0) > len(job["events"]):
        console.print(
            f"(the newest {len(job['events'])} of {job['events_total']} events; "
            f"all of them: GET /api/v1/jobs/{job['id']}/events?after=ID)"
        )


def logs(
    job_id: str,
    follow: bool = False,
    worker: int = 0,
    url: str = "http://127.0.0.1:7070",
) -> None:
    """What ``gpupool logs`` does (declared in cli/jobs.py)."""
    offset = 0
    delay = 0.2
    with client(url) as c:
        one = array_cli.job_id(c, job_id)
        while True:
            chunk = c.logs(one, worker=worker, offset=offset)
            if chunk.data:
                sys.stdout.buffer.write(chunk.data)
                sys.stdout.buffer.flush()
                offset, delay = chunk.next_offset, 0.2
                continue
            if not follow or chunk.finished:
                return
            time.sleep(delay)
            delay = min(delay * 1.5, 2.0)


def cancel(
    job_ids: list[str],
    url: str = "http://127.0.0.1:7070",
) -> None:
    """What ``gpupool cancel`` does (declared in cli/jobs.py)."""
    failed = False
    with client(url) as c:
        for job_id in job_ids:
            try:
                found, array = array_cli.resolve(c, job_id)
                if array is not None:
                    after = c.cancel_array(array["id"])
                    console.print(f"array {array['id']}: ", array_cli.counts_text(after["counts"]), sep="")
                    continue
                assert found is not None
                job = c.cancel(found["id"])
            except ClientError as exc:
                err_console.print(f"error: {exc.message}")
                failed = True
                continue
            if job["state"] == JobState.CANCELLED:
                console.print(f"job {job_id}: cancelled")
            else:
                console.print(f"job {job_id}: stopping (SIGTERM sent; SIGKILL after the grace period)")
    if failed:
        raise Exit(2)


def wait(
    job_id: str,
    timeout: str | None = None,
    url: str = "http://127.0.0.1:7070",
) -> None:
    """What ``gpupool wait`` does (declared in cli/jobs.py)."""
    deadline = time.monotonic() + parse_duration(timeout) if timeout else None
    delay = 0.1
    with client(url) as c:
        found, array = array_cli.resolve(c, job_id)
        while array is not None:
            if array_cli.finished(array):
                console.print(f"array {array['id']}: ", array_cli.counts_text(array["counts"]), sep="")
                raise Exit(0 if set(array["counts"]) == {JobState.SUCCEEDED.value} else 1)
            if deadline is not None and time.monotonic() >= deadline:
                err_console.print("timed out: array ", array_cli.counts_text(array["counts"]), sep="")
                raise Exit(1)
            time.sleep(delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic())))
            delay = min(delay * 1.5, 1.0)
            array = c.array(array["id"])
        assert found is not None
        while True:
            job = c.job(int(found["id"]))
            if job["state"] in TERMINAL:
                code = "" if job["exit_code"] is None else f" (exit code {job['exit_code']})"
                console.print(f"job {job_id} ", state_text(job["state"]), code, sep="")
                raise Exit(0 if job["state"] == JobState.SUCCEEDED else 1)
            if deadline is not None and time.monotonic() >= deadline:
                err_console.print(f"timed out: job {job_id} is still {job['state']}")
                raise Exit(1)
            time.sleep(delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic())))
            delay = min(delay * 1.5, 1.0)


def why(
    job_id: str,
    url: str = "http://127.0.0.1:7070",
    output: Output = Output.TABLE,
) -> None:
    """What ``gpupool why`` does (declared in cli/jobs.py)."""
    with client(url) as c:
        answer = c.why(array_cli.job_id(c, job_id))
    if output is Output.JSON:
        print_json(answer)
        return
    if answer["state"] == JobState.PENDING:
        console.print(
            f"job {job_id} is ", state_text(JobState.PENDING), f": [{answer['reason_code']}] {answer['reason']}", sep=""
        )
        if answer.get("estimated_start"):
            at = answer["estimated_start"]
            console.print(
                f"expected to start by {at.replace('T', ' ')[:19]} UTC (in {until(at)}), "
                "if the jobs in its way use their whole --max-runtime"
            )
        elif answer["reason_code"] == "unsatisfiable":
            console.print("no start estimate: the nodes that are up cannot run it, however long it waits")
        else:
            console.print("no start estimate: the jobs in its way have no --max-runtime")
    else:
        console.print(f"job {job_id} is not pending: {answer['reason']}")


def _asked_workers(job: dict[str, Any]) -> str:
    """The workers it asked for, as ``--workers`` takes them: ``4``, or ``2:8`` for an elastic job."""
    return f"{job['workers']}:{job['max_workers']}" if job.get("max_workers") else str(job["workers"])

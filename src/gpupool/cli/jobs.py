"""Job commands: submit, jobs, show, logs, cancel, wait, why."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from gpupool.cli import arrays as array_cli
from gpupool.cli.common import Output, OutputOpt, UrlOpt, client, console, err_console, print_json
from gpupool.cli.render import events_table, job_detail, jobs_table, rows_table, state_text, until
from gpupool.client import ClientError
from gpupool.domain.arrays import ArraySpec
from gpupool.domain.durations import parse_duration
from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import TERMINAL_STATES, JobSpec, JobState

TERMINAL = tuple(state.value for state in TERMINAL_STATES)


def submit(
    command: Annotated[list[str] | None, typer.Argument(help="the command, after --")] = None,
    name: Annotated[str | None, typer.Option(help="a name for people (default: the program)")] = None,
    project: Annotated[str | None, typer.Option(help="project (queue) to charge")] = None,
    gpus: Annotated[float, typer.Option(help="GPUs per worker: 0, a fraction below 1, or whole")] = 1.0,
    workers: Annotated[
        str,
        typer.Option(
            help="gang size: processes started together; or MIN:MAX (2:8), an elastic job that starts on MIN and"
            " grows into idle GPUs up to MAX, giving back only the workers above MIN"
        ),
    ] = "1",
    cpus: Annotated[
        str, typer.Option(help="CPU cores per worker: whole ones are pinned (2); a fraction (0.5, 500m) shares")
    ] = "0",
    memory: Annotated[str | None, typer.Option(help="memory per worker, e.g. 8G")] = None,
    priority: Annotated[str, typer.Option(help="interactive|train|inference")] = "train",
    max_restarts: Annotated[int, typer.Option(help="requeue this many times after a failure")] = 0,
    env: Annotated[list[str] | None, typer.Option(help="K=V, repeatable")] = None,
    workdir: Annotated[str | None, typer.Option(help="working directory (default: the current one)")] = None,
    gpu_model: Annotated[str | None, typer.Option(help="allowed GPU models, e.g. A100|H100")] = None,
    max_runtime: Annotated[str | None, typer.Option(help="e.g. 2h: stopped after this long")] = None,
    gpu_memory: Annotated[
        str | None, typer.Option(help="with a fraction: GPU memory it needs, e.g. 10G; else least per GPU")
    ] = None,
    checkpoint_dir: Annotated[
        str | None,
        typer.Option(
            help="directory every worker of every attempt gets as GPUPOOL_CHECKPOINT_DIR, to resume from "
            "(relative: to the current one); the job creates it and owns its contents, gpupool never touches them"
        ),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            help="the same key within 24 hours gives back the job it made instead of a second one "
            "(for scripts that retry) [default: a new one, kept across the CLI's own retries]"
        ),
    ] = None,
    array: Annotated[
        str | None,
        typer.Option(
            help="a job array: one task per index, e.g. 0-999, 0-999:2 (a step), 1,5,7; %N runs at most N at "
            "once. Each task gets GPUPOOL_ARRAY_INDEX"
        ),
    ] = None,
    expose: Annotated[
        int | None,
        typer.Option(
            help="a port worker 0 listens on, published by the gateway at /jobs/ID/ (the path kept, e.g. jupyter"
            " --ServerApp.base_url=/jobs/$GPUPOOL_JOB_ID/) to you, your project's managers and admins; any class"
            " (1 to 65535)",
        ),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            help="an OCI image to run in: a registry image (nvcr.io/nvidia/pytorch:24.10-py3), a name an admin"
            " imported, or an OCI layout or archive on a shared path (oci:/path, oci-archive:/x.tar); with it the"
            " command may be left out: the image's own Entrypoint and Cmd run",
        ),
    ] = None,
    gpu_power: Annotated[
        str | None,
        typer.Option(
            help="its GPUs' power: max (the GPU's default), efficient (the least energy per unit of work at most"
            " the head's --max-slowdown slower, from the model's calibration) or a limit in watts (400W)"
            " [default: the project's, else max]",
        ),
    ] = None,
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Submit a job (or with --array, an array of tasks); prints its id as the last line."""
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
    all: Annotated[bool, typer.Option("--all", "-a", help="include finished jobs")] = False,
    limit: Annotated[int, typer.Option(help="show at most this many, the newest")] = 1000,
    user: Annotated[str | None, typer.Option("--user", "-u", help="only the jobs this user submitted")] = None,
    mine: Annotated[bool, typer.Option("--mine", help="only the jobs you submitted (your token's user)")] = False,
    expand: Annotated[bool, typer.Option("--expand", help="every task of an array on a line of its own")] = False,
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """List jobs (pending and running; --all for finished ones too); an array is one line."""
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
    job_id: Annotated[str, typer.Argument(help="ID, or ID_INDEX for one task of an array")],
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Everything about one job, with its events; of an array, a summary of its tasks."""
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
    job_id: Annotated[str, typer.Argument(help="ID, or ID_INDEX for one task of an array")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing until the job ends")] = False,
    worker: Annotated[int, typer.Option(help="which worker's log")] = 0,
    url: UrlOpt = "http://127.0.0.1:7070",
) -> None:
    """Print a worker's log (stdout and stderr together)."""
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
    job_ids: Annotated[list[str], typer.Argument(help="IDs; an array's ID cancels every task, ID_INDEX one")],
    url: UrlOpt = "http://127.0.0.1:7070",
) -> None:
    """Cancel jobs: SIGTERM to their process groups, SIGKILL after the grace period."""
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
        raise typer.Exit(2)


def wait(
    job_id: Annotated[str, typer.Argument(help="ID (of an array: every task), or ID_INDEX for one task")],
    timeout: Annotated[str | None, typer.Option(help="give up after this long, e.g. 90 or 10m")] = None,
    url: UrlOpt = "http://127.0.0.1:7070",
) -> None:
    """Wait for a job (or every task of an array) to end: exit 0 if it (each) succeeded, 1 otherwise
    or on timeout."""
    deadline = time.monotonic() + parse_duration(timeout) if timeout else None
    delay = 0.1
    with client(url) as c:
        found, array = array_cli.resolve(c, job_id)
        while array is not None:
            if array_cli.finished(array):
                console.print(f"array {array['id']}: ", array_cli.counts_text(array["counts"]), sep="")
                raise typer.Exit(0 if set(array["counts"]) == {JobState.SUCCEEDED.value} else 1)
            if deadline is not None and time.monotonic() >= deadline:
                err_console.print("timed out: array ", array_cli.counts_text(array["counts"]), sep="")
                raise typer.Exit(1)
            time.sleep(delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic())))
            delay = min(delay * 1.5, 1.0)
            array = c.array(array["id"])
        assert found is not None
        while True:
            job = c.job(int(found["id"]))
            if job["state"] in TERMINAL:
                code = "" if job["exit_code"] is None else f" (exit code {job['exit_code']})"
                console.print(f"job {job_id} ", state_text(job["state"]), code, sep="")
                raise typer.Exit(0 if job["state"] == JobState.SUCCEEDED else 1)
            if deadline is not None and time.monotonic() >= deadline:
                err_console.print(f"timed out: job {job_id} is still {job['state']}")
                raise typer.Exit(1)
            time.sleep(delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic())))
            delay = min(delay * 1.5, 1.0)


def why(
    job_id: Annotated[str, typer.Argument(help="ID, or ID_INDEX for one task of an array")],
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Why a job is still pending."""
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

"""Job commands: submit, jobs, show, logs, cancel, wait, why: their declarations (options, help),
for Typer and the fast path alike. What each does is in ``cli/job_actions.py``, which takes the
parsed values under the same names."""

from __future__ import annotations

from typing import Annotated

import typer

from gpupool.cli import job_actions, submit_action
from gpupool.cli.common import Output
from gpupool.cli.opts import OutputOpt, UrlOpt


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
    submit_action.submit(**locals())


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
    job_actions.jobs(**locals())


def show(
    job_id: Annotated[str, typer.Argument(help="ID, or ID_INDEX for one task of an array")],
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Everything about one job, with its events; of an array, a summary of its tasks."""
    job_actions.show(**locals())


def logs(
    job_id: Annotated[str, typer.Argument(help="ID, or ID_INDEX for one task of an array")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing until the job ends")] = False,
    worker: Annotated[int, typer.Option(help="which worker's log")] = 0,
    url: UrlOpt = "http://127.0.0.1:7070",
) -> None:
    """Print a worker's log (stdout and stderr together)."""
    job_actions.logs(**locals())


def cancel(
    job_ids: Annotated[list[str], typer.Argument(help="IDs; an array's ID cancels every task, ID_INDEX one")],
    url: UrlOpt = "http://127.0.0.1:7070",
) -> None:
    """Cancel jobs: SIGTERM to their process groups, SIGKILL after the grace period."""
    job_actions.cancel(**locals())


def wait(
    job_id: Annotated[str, typer.Argument(help="ID (of an array: every task), or ID_INDEX for one task")],
    timeout: Annotated[str | None, typer.Option(help="give up after this long, e.g. 90 or 10m")] = None,
    url: UrlOpt = "http://127.0.0.1:7070",
) -> None:
    """Wait for a job (or every task of an array) to end: exit 0 if it (each) succeeded, 1 otherwise
    or on timeout."""
    job_actions.wait(**locals())


def why(
    job_id: Annotated[str, typer.Argument(help="ID, or ID_INDEX for one task of an array")],
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Why a job is still pending."""
    job_actions.why(**locals())

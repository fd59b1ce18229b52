"""What the job commands do: jobs, show, logs, cancel, wait, why (submit: cli/submit_action.py). Their options are
declared once, in ``cli/jobs.py`` (Typer: help, errors, the docs' reference); these functions
take the parsed values under the same names and import neither Typer nor Rich's parser, so the
fast path (``cli/fastpath.py``) can run them without loading either."""

from __future__ import annotations

import sys
import time
from typing import Any

from gpupool.cli import arrays as array_cli
from gpupool.cli.common import Output, client, console, err_console, print_json
from gpupool.cli.outcome import Exit
from gpupool.cli.render import events_table, job_detail, jobs_table, rows_table, state_text, until
from gpupool.client.errors import ClientError
from gpupool.domain.durations import parse_duration
from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import TERMINAL_STATES, JobState

TERMINAL = tuple(state.value for state in TERMINAL_STATES)


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

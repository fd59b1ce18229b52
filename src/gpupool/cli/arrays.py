"""What the job commands do with arrays: ``ID`` names a whole array (its first task's id, as in
Slurm), ``ID_INDEX`` one task; ``gpupool jobs`` folds an array into one line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpupool.cli.render import STATE_STYLE, ago, gpus_text, job_row
from gpupool.cli.styled import Styled
from gpupool.domain.arrays import parse_job_ref
from gpupool.domain.jobs import TERMINAL_STATES, JobState

if TYPE_CHECKING:
    from gpupool.client import GpupoolClient

ORDER = [s.value for s in JobState]  # counts shown in lifecycle order
TERMINAL = {s.value for s in TERMINAL_STATES}


def resolve(c: GpupoolClient, ref: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the job, None) for a plain job or one task (``ID_INDEX``); (None, the array) for the id
    of an array. One request for a plain job, two for an array."""
    job_id, index = parse_job_ref(ref)
    if index is not None:
        return c.array_task(job_id, index), None
    job = c.job(job_id)
    if job.get("array_id") == job_id:
        return None, c.array(job_id)
    return job, None


def job_id(c: GpupoolClient, ref: str) -> int:
    """The job id ``ref`` names: ``ID`` itself, or the job of task INDEX for ``ID_INDEX``."""
    array_id, index = parse_job_ref(ref)
    return array_id if index is None else int(c.array_task(array_id, index)["id"])


def counts_text(counts: dict[str, int]) -> Styled:
    text = Styled()
    for state in sorted(counts, key=lambda s: ORDER.index(s) if s in ORDER else len(ORDER)):
        if text:
            text.append(" ")
        text.append(f"{counts[state]} {state}", style=STATE_STYLE.get(state, ""))
    return text


def finished(array: dict[str, Any]) -> bool:
    return all(state in TERMINAL for state in array["counts"])


def table_rows(jobs: list[dict[str, Any]], arrays: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The rows of ``gpupool jobs``: plain jobs and one line per array, by id."""
    rows = [(j["id"], job_row(j)) for j in jobs]
    for a in arrays:
        first = a["job"]
        cap = f", at most {a['max_running']} at once" if a["max_running"] else ""
        rows.append(
            (
                a["id"],
                (
                    f"{a['id']}_*",
                    a["name"],
                    a["project"],
                    counts_text(a["counts"]),
                    gpus_text(first),
                    f"array of {a['tasks']} tasks{cap}",
                    ago(first["submitted_at"]),
                ),
            )
        )
    return [row for _, row in sorted(rows, key=lambda r: r[0])]


def summary_lines(array: dict[str, Any]) -> list[str | Styled]:
    first = array["job"]
    cap = f"at most {array['max_running']} at once" if array["max_running"] else "no cap on how many run at once"
    lines: list[str | Styled] = [
        f"array {array['id']} ({array['name']}) of {array['owner']} in project {array['project']}: "
        f"{array['tasks']} tasks of {gpus_text(first)} GPU each, {cap}",
        Styled("tasks: ").append_text(counts_text(array["counts"])),
    ]
    if first.get("command"):
        lines.append("command: " + " ".join(first["command"]))
    listed = array.get("task_list") or []
    failed = [f"{t['index']} (exit {t['exit_code']})" for t in listed if t["state"] == JobState.FAILED]
    if failed:
        lines.append("failed tasks: " + ", ".join(failed[:20]) + (" ..." if len(failed) > 20 else ""))
    lines.append(f"one task: gpupool show {array['id']}_INDEX; cancel them all: gpupool cancel {array['id']}")
    return lines

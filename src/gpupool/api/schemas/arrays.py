"""Job array request/response models. Field names here are a contract scripts depend on."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gpupool.api.schemas.jobs import JobOut, SubmitRequest
from gpupool.domain.records import ArraySummary, JobRecord


class ArraySubmitRequest(SubmitRequest):
    """A job's fields, plus the indices: every task is this job with its own index."""

    array: str = Field(
        description="task indices in Slurm's syntax: 0-999, 0-999:2 (a step), 1,5,10-12; "
        "%N after them runs at most N tasks at once (0-999%50)",
        max_length=1024,
    )


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jobs: list[SubmitRequest] = Field(description="1 to 1,000 jobs, made all or none in one transaction")


class TaskOut(BaseModel):
    index: int
    job_id: int
    state: str
    exit_code: int | None = None


class ArrayOut(BaseModel):
    id: int = Field(description="the array's id: the job id of its first task; ID_INDEX names one task")
    name: str
    project: str
    owner: str
    tasks: int = Field(description="how many tasks it has")
    max_running: int | None = Field(description="at most this many run at once (%N); null: no cap")
    counts: dict[str, int] = Field(description="how many tasks are in each state")
    job: JobOut = Field(description="its first task: what every task runs (with its own index)")
    task_list: list[TaskOut] | None = Field(None, description="every task by index (GET /arrays/{id} only)")

    @classmethod
    def of(cls, a: ArraySummary, full: bool = True, tasks: list[JobRecord] | None = None) -> ArrayOut:
        first = a.first
        return cls(
            id=first.id,
            name=first.spec.name,
            project=first.spec.project,
            owner=first.owner,
            tasks=a.tasks,
            max_running=a.max_running,
            counts=a.by_state,
            job=JobOut.of(first, full=full),
            task_list=None
            if tasks is None
            else [
                TaskOut(index=t.array_index or 0, job_id=t.id, state=t.state.value, exit_code=t.exit_code)
                for t in tasks
            ],
        )

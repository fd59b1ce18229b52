"""Job array use cases: submit one (a transaction for all its tasks), read, list, cancel it."""

from __future__ import annotations

from datetime import datetime

from gpupool.domain.arrays import ArraySpec
from gpupool.domain.errors import Conflict, InvalidInput, Stale
from gpupool.domain.jobs import JobSpec
from gpupool.domain.records import ArraySummary, JobRecord
from gpupool.domain.users import check_user_name
from gpupool.services.access import Visibility, require_job, require_submit
from gpupool.services.context import HeadContext
from gpupool.services.jobs import CANCEL_TRIES, MAX_LIST, check_satisfiable, keyed
from gpupool.store import arrays as array_repo
from gpupool.store import bulk
from gpupool.store import nodes as node_repo
from gpupool.store.db import Tx
from gpupool.store.tokens import Principal


def submit(
    ctx: HeadContext, spec: JobSpec, array: ArraySpec, who: Principal, key: str | None = None
) -> tuple[ArraySummary, bool]:
    """Every task or none, checked once (they are one shape); with ``key``, as a job's submit."""

    def make(s: Tx, now: datetime) -> tuple[ArraySummary, int]:
        require_submit(s, who, spec.project)
        _, in_flight = array_repo.array_ids(s, include_finished=False, owner=who.user, limit=1)
        if in_flight >= ctx.max_user_arrays:
            raise Conflict(
                f"{who.user} has {in_flight} arrays with unfinished tasks, the most this head allows"
                f" (gpupool up --max-user-arrays {ctx.max_user_arrays}): wait for one to finish, or cancel one"
                " (gpupool jobs lists them; gpupool cancel ID)",
                code="too_many_arrays",
            )
        check_satisfiable(spec, node_repo.load_nodes(s))
        run_as = ctx.accounts.run_as(who.user, who.unix_user)
        tasks = bulk.insert_array(s, spec, array, who.user, now, run_as)
        made = ArraySummary(
            first=tasks[0], tasks=len(tasks), by_state={"pending": len(tasks)}, max_running=array.max_running
        )
        return made, tasks[0].id

    return keyed(ctx, who, key, {"array": str(array), **spec.to_dict()}, make, array_repo.summary)


def show(ctx: HeadContext, array_id: int, who: Principal) -> tuple[ArraySummary, list[JobRecord], bool]:
    """The array, its tasks by index, and whether ``who`` sees what runs inside it."""
    with ctx.db.read() as s:
        summary = array_repo.summary(s, array_id)
        return summary, array_repo.tasks(s, array_id), Visibility(s, who).sees(summary.first)


def task(ctx: HeadContext, array_id: int, index: int) -> int:
    """The job id of one task (``ID_INDEX`` in the CLI)."""
    with ctx.db.read() as s:
        return array_repo.task_id(s, array_id, index)


def listing(
    ctx: HeadContext, who: Principal, include_finished: bool, limit: int = 1000, user: str | None = None
) -> tuple[list[tuple[ArraySummary, bool]], int]:
    """The newest ``limit`` arrays (with a task not finished, unless ``include_finished``)."""
    if not 1 <= limit <= MAX_LIST:
        raise InvalidInput(f"limit must be from 1 to {MAX_LIST}, got {limit}")
    if user is not None:
        check_user_name(user)
    with ctx.db.read() as s:
        ids, total = array_repo.array_ids(s, include_finished=include_finished, owner=user, limit=limit)
        visible = Visibility(s, who)
        return [(a, visible.sees(a.first)) for a in array_repo.summaries(s, ids)], total


def cancel(ctx: HeadContext, array_id: int, who: Principal) -> tuple[ArraySummary, int]:
    """Cancel every unfinished task; the array after, and how many tasks were cancelled."""
    for tries_left in range(CANCEL_TRIES - 1, -1, -1):
        try:
            with ctx.db.tx() as s:
                summary = array_repo.summary(s, array_id)
                require_job(s, who, summary.first, "cancel")
                cancelled = array_repo.cancel(s, array_id, ctx.clock.now(), who.user)
            break
        except Stale:  # the controller moved a task meanwhile: read them all again
            if not tries_left:
                raise
    ctx.wake_controller()
    with ctx.db.read() as s:
        return array_repo.summary(s, array_id), cancelled

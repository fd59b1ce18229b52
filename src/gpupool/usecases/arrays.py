"""Job array use cases: submit one (usecases/group_commit.py), read, list, cancel it."""

from __future__ import annotations

from gpupool.domain.errors import InvalidInput, Stale
from gpupool.domain.records import ArraySummary, JobRecord
from gpupool.domain.users import check_user_name
from gpupool.store import arrays as array_repo
from gpupool.store import bulk
from gpupool.store.tokens import Principal
from gpupool.usecases.access import Visibility, require_job
from gpupool.usecases.context import HeadContext
from gpupool.usecases.jobs import CANCEL_TRIES, MAX_LIST, make_array_tasks


def show(ctx: HeadContext, array_id: int, who: Principal) -> tuple[ArraySummary, list[JobRecord], bool]:
    """The array, its tasks by index, and whether ``who`` sees what runs inside it."""
    make_array_tasks(ctx.db)
    with ctx.db.read() as s:
        summary = array_repo.summary(s, array_id)
        return summary, array_repo.tasks(s, array_id), Visibility(s, who).sees(summary.first)


def task(ctx: HeadContext, array_id: int, index: int) -> int:
    """The job id of one task (``ID_INDEX`` in the CLI)."""
    make_array_tasks(ctx.db)
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
                bulk.make_tasks(s)  # every task a row, so each is cancelled as one job is
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

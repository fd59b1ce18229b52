"""User order: within a queue, whose jobs go next.

Fair share orders projects; inside one project the jobs of its users would otherwise go by
priority class and age alone, so one student's 500 queued jobs would hold every colleague's work
behind them. ``least_used``: within a priority class, the next job is the oldest one of the user
with the least load: the mean of the GPUs they hold in the project now (what this cycle started
for them included) and what they held there on average lately (the decayed usage, as projects'
``below_fair_share`` mixes them). A higher priority class still goes first, and one user's jobs
keep their own order.

``none``: every job of a queue is one user's, so the queue is the job order alone (FIFO)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler.hooks import JobOrder, UserOrder, one_line
from gpupool.scheduler.session import Session

EPSILON = 1e-9


def by_owner(job: PendingJob) -> str:
    return job.owner


def least_used(session: Session, job: PendingJob) -> float:
    """Half of what the job's owner holds in its project now (this cycle's starts included), half
    of what they held there lately."""
    project, user = key = (job.spec.project, job.owner)
    held = session.memory.user_held(project, user) + session.user_started.get(key, 0.0)
    return 0.5 * held + 0.5 * session.snapshot.user_usage.get(key, 0.0)


def unloaded(session: Session, job: PendingJob) -> float:
    return 0.0


LEAST_USED: UserOrder[Session] = UserOrder(by_owner, least_used)
NONE: UserOrder[Session] = UserOrder(one_line, unloaded)


def behind_lighter_users(
    session: Session, waiting: Iterable[PendingJob], order: UserOrder[Session], job_order: JobOrder
) -> dict[int, str]:
    """For each waiting job that later jobs of its project and class go before, because their
    users used less lately, a clause saying so (``gpupool why``). Users of equal load are not
    ahead of one another (age decides between them).

    The clause names the users, never loads or counts, so it stays the same from cycle to cycle
    while the set of users ahead does (the controller writes only reasons that changed). Jobs of
    one user tier share at most one clause per lighter user, so the cost is a bisect per job."""
    lines, someone = _lines_of_shared_projects(waiting, order, job_order)
    notes: dict[int, str] = {}
    for (project, _), in_line in lines.items():
        if len(in_line) < 2:
            continue
        loads = sorted((order.load(session, someone[(project, name)]), name) for name in in_line)
        lighter: list[tuple[float, str]] = []  # lighter users by the submit time of their latest job
        i = 0
        while i < len(loads):
            end = i + 1
            while end < len(loads) and loads[end][0] <= loads[i][0] + EPSILON:
                end += 1
            tier = [name for _, name in loads[i:end]]
            i = end
            latest = [at for at, _ in lighter]
            clauses: dict[int, str] = {}  # by how many lighter users have no later job
            for submitted, job_id in (job for name in tier for job in in_line[name]) if lighter else ():
                first = bisect.bisect_right(latest, submitted)
                if first < len(lighter):
                    if first not in clauses:
                        clauses[first] = _clause(project, sorted(name for _, name in lighter[first:]))
                    notes[job_id] = clauses[first]
            for name in tier:
                bisect.insort(lighter, (max(at for at, _ in in_line[name]), name))
    return notes


Lines = dict[tuple[str, int], dict[str, list[tuple[float, int]]]]  # (project, class) -> user -> (submitted, id)


def _lines_of_shared_projects(
    waiting: Iterable[PendingJob], order: UserOrder[Session], job_order: JobOrder
) -> tuple[Lines, dict[tuple[str, str], PendingJob]]:
    """The lines of the projects with jobs of two users or more (nobody is ahead of anybody in
    the others), and a job of each of their users, to ask the load. Grouped by user first, so a
    queue whose projects have one user each costs one look-up per job."""
    by_user: dict[tuple[str, str], list[PendingJob]] = {}  # (project, user) -> their jobs, in order
    user = order.user
    for job in waiting:
        mine = by_user.get((job.spec.project, user(job)))
        if mine is None:
            by_user[(job.spec.project, user(job))] = [job]
        else:
            mine.append(job)
    users_of: dict[str, int] = {}
    for project, _ in by_user:
        users_of[project] = users_of.get(project, 0) + 1
    lines: Lines = {}
    someone: dict[tuple[str, str], PendingJob] = {}
    for (project, name), jobs in by_user.items():
        if users_of[project] < 2:
            continue
        someone[(project, name)] = jobs[0]
        for job in jobs:
            rank, submitted, job_id = job_order(job)
            lines.setdefault((project, rank), {}).setdefault(name, []).append((submitted, job_id))
    return lines, someone


def _clause(project: str, users: list[str]) -> str:
    named = " and ".join(users) if len(users) <= 2 else f"{users[0]}, {users[1]} and {len(users) - 2} more"
    who = users[0] if len(users) == 1 else "they"
    return f"; later jobs of {named} go first: {who} used less of project {project} lately"

"""Read-then-write races on both engines (issue 15, part 4): what SQLite serialises with BEGIN
IMMEDIATE and PostgreSQL with row locks. Two requests that make the same thing at once give one
success and a 409 ``concurrent_change`` (never a 500); a project is never deleted while a job is
submitted to it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from gpupool.domain.errors import Conflict, GpupoolError
from gpupool.domain.jobs import JobSpec
from gpupool.domain.projects import Project
from gpupool.store.tokens import Principal
from gpupool.usecases import jobs as job_service
from gpupool.usecases import projects as project_service
from gpupool.usecases.context import HeadContext

ADMIN = Principal("admin", "admin")


def _together(n: int, call: Callable[[int], object]) -> list[object]:
    """``call(i)`` from ``n`` threads released at once; each result, or the error it raised."""
    barrier = threading.Barrier(n)
    results: list[object] = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = call(i)
        except Exception as exc:  # what a request would answer: a GpupoolError is a 4xx, anything else a 500
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def test_making_one_project_at_once_is_one_success_and_409s_never_a_500(ctx: HeadContext) -> None:
    results = _together(6, lambda i: project_service.set_project(ctx, Project.create("fresh", quota=i), ADMIN))
    errors = [r for r in results if isinstance(r, Exception)]
    assert all(isinstance(e, Conflict) and e.code == "concurrent_change" for e in errors), errors
    assert len(errors) < len(results)
    assert [p.project.name for p in project_service.listing(ctx)].count("fresh") == 1


def test_a_project_is_not_deleted_while_a_job_is_submitted_to_it(ctx: HeadContext) -> None:
    for round_ in range(5):
        name = f"short-lived-{round_}"
        project_service.set_project(ctx, Project.create(name, quota=1), ADMIN, everyone=True)
        spec = JobSpec.create(command=["train"], project=name, gpus=0)

        def race(i: int, spec: JobSpec = spec, name: str = name) -> object:
            if i == 0:
                return project_service.delete_project(ctx, name, ADMIN)
            return job_service.submit(ctx, spec, ADMIN)

        results = _together(2, race)
        assert all(not isinstance(r, Exception) or isinstance(r, GpupoolError) for r in results), results
        deleted = not isinstance(results[0], Exception)
        submitted = not isinstance(results[1], Exception)
        assert deleted != submitted, results  # the submit came first (then the delete is refused) or second
        if submitted:
            assert results[0].code == "project_in_use"  # type: ignore[union-attr]

"""A job of a trace: what the loaders (``trace``) produce, the shaping knobs (``workload``)
rewrite and the replay (``engine``, ``plan``) consumes. Its own module so that those import it
without importing each other."""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.jobs import JobSpec


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: str
    submit_time: float
    duration: float | None  # None: never ends (placement studies)
    spec: JobSpec
    # Who submitted it (the gpupool format's ``user``): within a project, the jobs of whoever
    # holds less go first. Empty in traces without users: every job of a project is then one user's.
    user: str = ""

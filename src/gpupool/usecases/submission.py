"""What a submission is checked against, once for every way in: ``POST /jobs``, a batch and an
array all reach the group commit (usecases/group_commit.py), which checks each with ``Checks``.

A request is one of three kinds. A ``Job`` is one job; a ``Batch`` is many, all or none, its
refusals naming the job (``jobs[3]: ...``); an ``Array`` is one spec made once per index, under
the head's limit of arrays in flight per user. Each says what its idempotency key is remembered
with (``request``) and how a replay of its key reads what it made then (``replay``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from math import inf
from typing import Any

from gpupool.domain.arrays import ArraySpec
from gpupool.domain.decisions import ReasonCode
from gpupool.domain.errors import Conflict, GpupoolError, InvalidInput, Unsatisfiable
from gpupool.domain.jobs import JobSpec
from gpupool.domain.nodes import Node
from gpupool.domain.power import check_cluster_watts
from gpupool.domain.records import ArraySummary, JobRecord
from gpupool.domain.resources import CPU_MILLI, show_cpus
from gpupool.scheduler.capacity import room_for, shape, such
from gpupool.scheduler.demand import WorkerDemand
from gpupool.store import arrays as array_repo
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store.db import Tx
from gpupool.store.tokens import Principal
from gpupool.usecases.access import require_submit
from gpupool.usecases.context import HeadContext

MAX_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Job:
    spec: JobSpec

    def request(self) -> dict[str, Any]:
        return self.spec.to_dict()

    def replay(self, s: Tx, job_id: int) -> JobRecord:
        return job_repo.get_job(s, job_id)


@dataclass(frozen=True, slots=True)
class Batch:
    """Bounded here, before it queues: a batch out of bounds never reaches a transaction."""

    specs: tuple[JobSpec, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.specs) <= MAX_BATCH:
            raise InvalidInput(f"a batch holds 1 to {MAX_BATCH} jobs, got {len(self.specs)}")

    def request(self) -> dict[str, Any]:
        return {"jobs": [spec.to_dict() for spec in self.specs]}

    def replay(self, s: Tx, job_id: int) -> list[JobRecord]:
        raise AssertionError("a batch takes no idempotency key")  # POST /jobs:batch has none


@dataclass(frozen=True, slots=True)
class Array:
    spec: JobSpec
    array: ArraySpec

    def request(self) -> dict[str, Any]:
        return {"array": str(self.array), **self.spec.to_dict()}

    def replay(self, s: Tx, job_id: int) -> ArraySummary:
        return array_repo.summary(s, job_id)


Request = Job | Batch | Array
Made = JobRecord | list[JobRecord] | ArraySummary


class Checks:
    """Every check a submission passes before it is written, with what a group shares read once:
    the nodes (``NodeCache``), each caller's grant to each project, each caller's arrays in flight."""

    def __init__(self, s: Tx, ctx: HeadContext, nodes: NodeCache, array_bounds: dict[str, int] | None = None) -> None:
        """``array_bounds``: at most how many arrays each user had in flight after an earlier group
        (``arrays`` of its ``Checks``, once committed). Arrays enter flight only by submission, so
        a count carried forward can only be too high: a submission under it is let through without
        counting again; one it would refuse is counted afresh first."""
        self._s, self._ctx, self._read_nodes = s, ctx, nodes
        self._nodes: list[Node] | None = None
        self._fresh = False  # whether the nodes were read afresh in this group
        self._allowed: dict[tuple[str, str], GpupoolError | None] = {}
        self._bounds = array_bounds or {}
        self._in_flight: dict[str, int] = {}  # per user, before this group: counted, or a bound
        self._counted: set[str] = set()  # users whose count was read from the store in this group
        self._added: dict[str, int] = {}  # arrays this group let through, per user

    def run(self, what: Request, who: Principal) -> str | None:
        """Refuse ``what`` (a ``GpupoolError``) or say the Unix account its jobs run as."""
        if isinstance(what, Batch):
            for project in sorted({spec.project for spec in what.specs}):
                self._access(who, project)
            for n, spec in enumerate(what.specs):
                try:
                    self._satisfiable(spec)
                except (InvalidInput, Unsatisfiable) as exc:
                    raise type(exc)(f"jobs[{n}]: {exc.message}", code=exc.code) from None
        else:
            self._access(who, what.spec.project)
            if isinstance(what, Array):
                self._array_room(who)
            self._satisfiable(what.spec)
        run_as = self._ctx.accounts.run_as(who.user, who.unix_user)
        if isinstance(what, Array):
            self._added[who.user] += 1
        return run_as

    @property
    def arrays(self) -> dict[str, int]:
        """At most how many arrays each user checked here has in flight, this group's included."""
        return {user: n + self._added[user] for user, n in self._in_flight.items()}

    def _satisfiable(self, spec: JobSpec) -> None:
        """Against the nodes kept between groups; a refusal only against nodes read afresh."""
        if self._nodes is None:
            self._nodes = self._read_nodes(self._s)
        try:
            check_satisfiable(spec, self._nodes)
        except GpupoolError:
            if self._fresh:
                raise
            self._nodes, self._fresh = self._read_nodes(self._s, fresh=True), True
            check_satisfiable(spec, self._nodes)

    def _array_room(self, who: Principal) -> None:
        """``gpupool up --max-user-arrays``: arrays with an unfinished task, per user."""
        user, most = who.user, self._ctx.max_user_arrays
        if user not in self._in_flight:
            self._in_flight[user], self._added[user] = self._bounds.get(user, most), 0
        if self._in_flight[user] + self._added[user] >= most and user not in self._counted:  # or unknown
            self._in_flight[user] = array_repo.count_unfinished(self._s, user)  # not this group's, unwritten
            self._counted.add(user)
        in_flight = self._in_flight[user] + self._added[user]
        if in_flight >= most:
            raise Conflict(
                f"{who.user} has {in_flight} arrays with unfinished tasks, the most this head allows"
                f" (gpupool up --max-user-arrays {most}): wait for one to finish, or cancel one"
                " (gpupool jobs lists them; gpupool cancel ID)",
                code="too_many_arrays",
            )

    def _access(self, who: Principal, project: str) -> None:
        """``require_submit``, once per caller and project in a group; a grant is remembered a
        moment longer where writers take turns (usecases/grants.py)."""
        access = (who.user, project)
        if access not in self._allowed:
            grants, remembered = self._ctx.grants, self._ctx.db.one_writer
            if remembered and grants.granted(who.user, project, who.is_admin):
                self._allowed[access] = None
            else:
                self._allowed[access] = _refusal(self._s, who, project)
                if remembered and self._allowed[access] is None:
                    grants.grant(who.user, project, who.is_admin)
        if (refused := self._allowed[access]) is not None:
            raise refused


class NodeCache:
    """The nodes a submission is checked against, read again only when ``nodes_stamp`` changes:
    parsing every node and GPU row for each group was a fifth of a lone submission's cost. Even
    the stamp is asked at most every ``STAMP_EVERY_S``: a job accepted against a node that left
    within that second waits as any job whose node leaves after its submission does, and one
    refused by nodes read earlier than that is checked again against fresh ones."""

    STAMP_EVERY_S = 1.0

    def __init__(self) -> None:
        self._stamp: tuple[object, ...] | None = None
        self._nodes: list[Node] = []
        self._asked = -inf

    def __call__(self, s: Tx, fresh: bool = False) -> list[Node]:
        now = time.monotonic()
        if fresh or now - self._asked >= self.STAMP_EVERY_S:
            stamp = node_repo.nodes_stamp(s)
            if stamp != self._stamp:
                self._nodes, self._stamp = node_repo.load_nodes(s), stamp
            self._asked = now
        return self._nodes


MIN_MEMORY_MIB = 32  # a Python interpreter alone takes ~10 MiB; below this a worker dies at start


def check_satisfiable(spec: JobSpec, nodes: list[Node]) -> None:
    """Refuse at submit what no node could ever run, rather than let it wait forever; and a memory
    limit so low that the worker would be killed as it starts (a job's memory limit is real here,
    unlike in a simulation, which keeps the traces' figures)."""
    if 0 < spec.memory_mib < MIN_MEMORY_MIB:
        raise InvalidInput(
            f"--memory {spec.memory_mib}M is below the least a worker can start with ({MIN_MEMORY_MIB}M): "
            "leave it out for no limit",
            code="memory_too_low",
        )
    if not nodes:
        return
    demand = WorkerDemand.of(spec)
    usable = [n for n in nodes if demand.models is None or any(g.model in demand.models for g in n.gpus)]
    if not usable and demand.needs_gpu:
        models = sorted({g.model for n in nodes for g in n.gpus})
        raise Unsatisfiable(
            f"no node has a GPU of model {spec.gpu_model}; models here: {', '.join(models)}",
            code=ReasonCode.GPU_MODEL.value,
        )
    check_cluster_watts(spec.gpu_power, [g for n in usable for g in n.gpus])
    biggest_gpu = max((g.memory_mib for n in nodes for g in n.gpus), default=0)
    if spec.gpu_memory_mib > biggest_gpu:
        raise Unsatisfiable(
            f"{spec.gpu_memory_mib} MiB of GPU memory is more than any GPU here has (at most {biggest_gpu} MiB)"
        )
    most = max(len(n.gpus) for n in usable or nodes)
    if demand.whole_gpus > most:
        raise Unsatisfiable(
            f"{demand.whole_gpus} GPUs per worker is more than any node has (at most {most}); "
            "use more workers with fewer GPUs each"
        )
    if demand.share and most == 0:
        raise Unsatisfiable("a GPU share needs a node with a GPU; no node has one")
    if spec.cpu_milli > max(n.cpus for n in nodes) * CPU_MILLI:
        raise Unsatisfiable(
            f"{show_cpus(spec.cpu_milli)} CPU cores per worker is more than any node has"
            f" (at most {max(n.cpus for n in nodes)})"
        )
    if spec.memory_mib > max(n.memory_mib for n in nodes):
        raise Unsatisfiable(
            f"{spec.memory_mib} MiB memory per worker is more than any node has "
            f"(at most {max(n.memory_mib for n in nodes)} MiB)"
        )
    # Each part fits some node: do they fit together, and does the gang fit the whole cluster?
    # Every node counts, whatever its state: one down or drained may come back (a Ray node
    # rejoins), and until then the job waits as ``unsatisfiable``, its reason naming it.
    # An elastic job's maximum too (issue 35): a width it could never reach is a mistake.
    room = room_for(demand, nodes, spec.most_workers)
    if room < spec.most_workers:
        fewer = f"ask for at most {room} workers, or less for each" if room else "ask for less per worker"
        if spec.elastic and room >= spec.workers:
            fewer = f"ask for --workers {spec.workers}:{room} at most"
        raise Unsatisfiable(
            f"{shape(demand, spec.most_workers)} can never run here: all {len(nodes)} nodes together, idle, hold "
            f"{such(room)}; {fewer}"
        )


def _refusal(s: Tx, who: Principal, project: str) -> GpupoolError | None:
    try:
        require_submit(s, who, project)
    except GpupoolError as exc:
        return exc
    return None

"""Carry out a cycle's decisions: starts, preemptions and kills. The one component that acts.

Each decision was made on a snapshot, so each is written guarded by what the snapshot saw: a
job cancelled since is not started, a job that ended since is not preempted (``Stale``), and a
dropped decision never takes the rest of the cycle's decisions with it.

A start writes placements first, then launches, then marks running: a head killed mid-launch
restarts knowing which GPUs it gave away, and recovery (``controller/recovery.py``) finishes or
rolls back what was half done.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import NamedTuple

from gpupool.clock import Clock
from gpupool.controller.power import LaunchPower
from gpupool.domain.decisions import GrowJob, Preempt, ShrinkJob, StartJob
from gpupool.domain.errors import Conflict, Stale
from gpupool.domain.jobs import JobSpec, JobState, StopReason
from gpupool.domain.launch import LaunchRequest, PowerSetting, RegistryAuth, WorkerHandle
from gpupool.domain.power import DEFAULT_MAX_SLOWDOWN
from gpupool.domain.records import WorkerRecord
from gpupool.domain.users import ADMIN_USER
from gpupool.domain.worker_env import NODE_ADDRESS_ENV, Rendezvous, worker_env
from gpupool.executors.base import Executor
from gpupool.store import jobs as job_repo
from gpupool.store import registry_logins as login_repo
from gpupool.store import workers as worker_repo
from gpupool.store.db import Database, Tx
from gpupool.store.sealing import Sealer
from gpupool.store.transitions import move_job
from gpupool.store.workers import StartTicket

log = logging.getLogger("gpupool.controller")


class Applier:
    def __init__(
        self,
        db: Database,
        executor: Executor,
        clock: Clock,
        kill_grace_s: float,
        allow_system_accounts: bool = False,
        sealer: Sealer | None = None,
        max_slowdown: float = DEFAULT_MAX_SLOWDOWN,
    ) -> None:
        self._db = db
        self._max_slowdown = max_slowdown  # what efficient may cost in speed (--max-slowdown)
        self._sealer = sealer  # opens owners' registry logins for their images' pulls (None: none are used)
        self._allow_system = allow_system_accounts
        self._executor = executor
        self._clock = clock
        self._grace = kill_grace_s
        self._signalled: set[int] = set()  # worker ids already sent SIGTERM

    def start_all(self, starts: Iterable[StartJob], specs: Mapping[int, JobSpec]) -> dict[int, int]:
        """Start the jobs the scheduler placed; ``specs`` come from the cycle's snapshot.
        Returns the attempt each started job is on; a start dropped as stale is left out.

        The cycle's starts share two commits, not two each (each waits for the disk on the
        controller's one thread): every pending -> starting in one transaction, a savepoint each
        so a stale one is dropped alone; the launches; every handle and starting -> running in
        one more. Should a batch fail as a whole, each start is redone on its own, as before."""
        decisions = list(starts)
        begun = self._begin_all(decisions)
        if begun is None:  # the batch could not be written: one at a time, each guarded alone
            started: dict[int, int] = {}
            for decision in decisions:
                attempt = self.start(decision, specs[decision.job_id])
                if attempt is not None:
                    started[decision.job_id] = attempt
            return started
        defaults: dict[str, str | None] = {}  # each project's GPU power default, read once a cycle
        finishes = [self._launch_begun(d, specs[d.job_id], ticket, defaults) for d, ticket in begun]
        self._finish_all(finishes)
        return {decision.job_id: ticket.attempt for decision, ticket in begun}

    def start(self, decision: StartJob, spec: JobSpec) -> int | None:
        """Start one job. Returns the attempt started (1: the job's first start), or None when
        the job is no longer pending as the snapshot saw it (cancelled since): nothing is done."""
        now = self._clock.now()
        try:
            with self._db.tx() as s:
                ticket = worker_repo.begin_start(s, decision.job_id, decision.placements, now)
        except Conflict as exc:  # Stale among them: the decision is dropped, the cycle goes on
            log.info("not starting job %s: %s", decision.job_id, exc)
            return None
        self._finish_start(*self._launch_begun(decision, spec, ticket))
        return ticket.attempt

    def _begin_all(self, decisions: list[StartJob]) -> list[tuple[StartJob, StartTicket]] | None:
        """Every decision's pending -> starting in one transaction, each in a savepoint: a job
        cancelled since its snapshot is dropped (logged) and the rest go on. None when the
        transaction as a whole could not be committed (nothing was written)."""
        if not decisions:
            return []
        now = self._clock.now()
        begun: list[tuple[StartJob, StartTicket]] = []
        try:
            with self._db.tx() as s:
                for decision in decisions:
                    try:
                        with s.begin_nested():
                            begun.append(
                                (decision, worker_repo.begin_start(s, decision.job_id, decision.placements, now))
                            )
                    except Conflict as exc:  # Stale among them: this decision is dropped
                        log.info("not starting job %s: %s", decision.job_id, exc)
        except Conflict as exc:
            log.info("the cycle's starts could not be written together, each goes alone: %s", exc)
            return None
        return begun

    def _launch_begun(
        self, decision: StartJob, spec: JobSpec, ticket: StartTicket, defaults: dict[str, str | None] | None = None
    ) -> _Finish:
        """Launch a begun start's workers: what its finish will record."""
        attempt, job_id = ticket.attempt, decision.job_id
        in_image = spec.image is not None
        try:
            rendezvous = self._executor.rendezvous(decision.placements[0].node)
            if spec.elastic:  # workers a grow adds later are told the same one (issue 35)
                with self._db.tx() as s:
                    worker_repo.set_rendezvous(s, job_id, rendezvous.endpoint)
        except Exception as exc:  # the node went away since the snapshot: nothing is launched
            log.exception("rendezvous for job %s failed", job_id)
            failed = [
                (worker_id, f"no rendezvous on {decision.placements[0].node}: {exc}") for worker_id, _ in ticket.workers
            ]
            return _Finish(job_id, attempt, [], failed, in_image, None)
        power = LaunchPower.load(self._db, spec, self._max_slowdown, defaults)  # its GPUs' setting (issue 33)
        launched, failed, powers = self._launch(job_id, spec, ticket, rendezvous, decision.power_cap_w, power)
        power.record(self._db, job_id, self._clock.now())
        return _Finish(job_id, attempt, launched, failed, in_image, powers)

    def _finish_all(self, finishes: list[_Finish]) -> None:
        """Every launched start's handles and starting -> running in one transaction (what
        ``_finish_start`` writes for one). A job moved by someone else meanwhile fails the whole
        transaction (nothing written): then each is finished on its own, where a moved job keeps
        its handles and its state."""
        if not finishes:
            return
        try:
            with self._db.tx() as s:
                now = self._clock.now()
                for f in finishes:
                    self._record_finish(s, f, now)
        except Stale as exc:
            log.info("a job changed while the cycle's starts were recorded, each is recorded alone: %s", exc)
            for f in finishes:
                self._finish_start(*f)

    def grow_all(self, grows: Iterable[GrowJob], specs: Mapping[int, JobSpec]) -> int:
        """Add the workers each grow decided to its running elastic job; how many jobs grew."""
        return sum(self.grow(decision, specs[decision.job_id]) for decision in grows)

    def grow(self, decision: GrowJob, spec: JobSpec) -> bool:
        """Launch the workers a grow adds to a running elastic job (issue 35), each as a start
        launches one (the same walls, account, image and environment), in the job's current
        attempt and told its attempt's rendezvous. False when the job changed since the snapshot
        (ended, being stopped, at its maximum): nothing is done. A newcomer whose launch fails is
        released: the job runs on without it, no restart counted."""
        now = self._clock.now()
        try:
            with self._db.tx() as s:
                ticket = worker_repo.begin_grow(s, decision.job_id, decision.placements, now, decision.message)
        except Conflict as exc:
            log.info("not growing job %s: %s", decision.job_id, exc)
            return False
        rendezvous = Rendezvous.parse(ticket.rendezvous or "")
        power = LaunchPower.load(self._db, spec, self._max_slowdown)
        launched, failed, powers = self._launch(decision.job_id, spec, ticket, rendezvous, None, power)
        power.record(self._db, decision.job_id, self._clock.now())
        with self._db.tx() as s:
            self._record_launches(s, decision.job_id, launched, failed, self._clock.now(), powers)
            for worker_id, _ in failed:
                worker_repo.release_worker(s, worker_id)
        return True

    def shrink_all(self, shrinks: Iterable[ShrinkJob]) -> int:
        """Stop the workers each shrink decided; how many jobs shrank."""
        return sum(self.shrink(decision) for decision in shrinks)

    def shrink(self, decision: ShrinkJob) -> bool:
        """Stop some of a running elastic job's workers above its minimum (issue 35) as a
        preemption stops a job's: SIGTERM now, SIGKILL after the grace period (the supervisor's).
        The job runs on: they are marked released first, so their exits are not judged as its
        failure, and the snapshot counts them leaving until they end. False when the job changed
        since the snapshot (ended, being stopped, or it would go below its minimum)."""
        try:
            with self._db.tx() as s:
                leaving = worker_repo.begin_shrink(
                    s, decision.job_id, decision.workers, self._clock.now(), decision.message
                )
        except Conflict as exc:
            log.info("not shrinking job %s: %s", decision.job_id, exc)
            return False
        self.kill(leaving)
        return True

    def _launch(
        self,
        job_id: int,
        spec: JobSpec,
        ticket: StartTicket,
        rendezvous: Rendezvous,
        cap: float | None,
        power: LaunchPower,
    ) -> tuple[list[tuple[int, WorkerHandle, int | None]], list[tuple[int, str]], dict[int, PowerSetting | None]]:
        """Launch the ticket's workers: the handles of those launched, the launches that failed,
        and the GPU power setting each launched with. ``cap``: the power budget's cap on each GPU
        (issue 33), None: none."""
        attempt = ticket.attempt
        launched: list[tuple[int, WorkerHandle, int | None]] = []
        failed: list[tuple[int, str]] = []
        login = self._registry_login(ticket.owner, spec.image)
        powers: dict[int, PowerSetting | None] = {}  # the setting each worker launches with
        for worker_id, p in ticket.workers:
            env = worker_env(
                job_id=job_id,
                spec=spec,
                placement=p,
                rendezvous=rendezvous,
                restarts=attempt - 1,
                preempted=ticket.preempted,
                checkpoint_dir=spec.checkpoint_dir,
                array=ticket.array,
                attempt=attempt,
            )
            port = None
            if spec.port_env:  # a service replica: a free port on its own node, in the variable it named
                try:
                    there = self._executor.rendezvous(p.node)
                except Exception as exc:
                    failed.append((worker_id, f"no free port on {p.node} for worker {p.worker}: {exc}"))
                    continue
                port = there.master_port
                env[spec.port_env] = str(port)
                # Where the gateway and the health checks reach it: a server that listens only on
                # 127.0.0.1 is out of their reach on any node but the head's own.
                env[NODE_ADDRESS_ENV] = there.master_addr
            gpus = ",".join(map(str, p.gpus)) or "none"
            # The port it serves (a replica's, or worker 0's published one) answers its job and the
            # gateway only: the node walls it from every other job (``node/netwall.py``).
            served = port if port is not None else spec.expose if p.worker == 0 else None
            request = LaunchRequest(
                job_id=job_id,
                attempt=attempt,
                worker=p.worker,
                argv=spec.command,
                env=env,
                workdir=spec.workdir,
                cpus=p.cpus,
                gpus=p.gpus,
                cpu_milli=p.cpu_milli,
                memory_mib=p.memory_mib,
                grace_s=self._grace,
                run_as=ticket.run_as,
                # The built-in admin's jobs run as the head's own account, root where it is root.
                allow_system_account=self._allow_system or ticket.owner == ADMIN_USER,
                gpu_share=p.gpu_share,
                gpu_memory_mib=p.gpu_memory_mib,
                header=f"--- gpupool: job {job_id} attempt {attempt} worker {p.worker} on {p.node} GPUs {gpus} ---",
                port=served,
                image=spec.image,
                registry_auth=login,
                gpu_power=_capped(power.setting(p), cap),
            )
            powers[worker_id] = request.gpu_power
            try:
                launched.append((worker_id, self._executor.launch(p.node, request), port))
            except Exception as exc:  # an executor failure must not take the controller down
                log.exception("launch of job %s worker %s failed", job_id, p.worker)
                failed.append((worker_id, f"launch of worker {p.worker} on {p.node} failed: {exc}"))
        return launched, failed, powers

    def _registry_login(self, owner: str, image: str | None) -> RegistryAuth | None:
        """The owner's login to the image's registry (``gpupool login --registry``), if they gave
        one; one that cannot be opened is left out (the pull goes on with the node's own file) and logged."""
        if image is None or self._sealer is None:
            return None
        try:
            with self._db.read() as s:
                return login_repo.auth_for(s, self._sealer, owner, image)
        except Conflict as exc:
            log.warning("not using %s's registry login: %s", owner, exc)
            return None

    def preempt_all(self, victims: Iterable[Preempt]) -> int:
        """Ask each of the scheduler's victims to stop and requeue; how many were."""
        return sum(self.preempt(victim.job_id, victim.message) for victim in victims)

    def preempt(
        self,
        job_id: int,
        message: str,
        reason: StopReason = StopReason.PREEMPT,
        not_before: datetime | None = None,
    ) -> bool:
        """Ask a running job to stop and requeue (``reason``: preempt or idle), in a guarded
        write of its own; False when it is no longer running or already being stopped."""
        try:
            with self._db.tx() as s:
                return job_repo.request_preempt(s, job_id, self._clock.now(), message, not_before, reason=reason)
        except Conflict as exc:
            log.info("not preempting job %s: %s", job_id, exc)
            return False

    def kill(self, workers: Iterable[WorkerRecord]) -> None:
        """SIGTERM each worker's process group (the supervisor sends SIGKILL after the grace
        period); once per worker, however often it is asked."""
        for w in workers:
            if w.handle is None or w.id in self._signalled:
                continue
            try:
                self._executor.kill(w.placement.node, w.handle)
                self._signalled.add(w.id)
            except Exception:
                log.exception("stopping worker %s of job %s failed", w.placement.worker, w.job_id)

    def forget(self, worker_ids: Iterable[int]) -> None:
        """Workers that ended: no more to stop."""
        self._signalled.difference_update(worker_ids)

    def _finish_start(
        self,
        job_id: int,
        attempt: int,
        launched: list[tuple[int, WorkerHandle, int | None]],
        failed: list[tuple[int, str]],
        in_image: bool = False,
        powers: Mapping[int, PowerSetting | None] | None = None,
    ) -> None:
        """Record handles and failed launches, then starting -> running, in one commit; a job in
        an image stays starting until its nodes have the image (the images step moves it: its
        clock, ``--max-runtime`` included, starts once it runs in its image). The job
        may have been asked to stop meanwhile: that leaves its state alone (only the controller
        moves a starting job), and the monitor stops what was launched. The handles must never
        be lost: should the state have moved after all, they are written on their own."""
        finish = _Finish(job_id, attempt, launched, failed, in_image, powers)
        try:
            with self._db.tx() as s:
                self._record_finish(s, finish, self._clock.now())
        except Stale as exc:  # moved by someone else: keep the handles; the monitor settles it
            log.info("job %s changed while it started: %s", job_id, exc)
            with self._db.tx() as s:
                self._record_launches(s, job_id, launched, failed, self._clock.now(), powers)

    def _record_finish(self, s: Tx, f: _Finish, now: datetime) -> None:
        self._record_launches(s, f.job_id, f.launched, f.failed, now, f.powers)
        state, starts = job_repo.job_for_update(s, f.job_id, "state", "starts")
        if state == JobState.STARTING.value and not (f.in_image and not f.failed):
            move_job(s, f.job_id, JobState.STARTING, starts, JobState.RUNNING, now, f"running (attempt {f.attempt})")

    @staticmethod
    def _record_launches(
        s: Tx,
        job_id: int,
        launched: list[tuple[int, WorkerHandle, int | None]],
        failed: list[tuple[int, str]],
        now: datetime,
        powers: Mapping[int, PowerSetting | None] | None = None,
    ) -> None:
        for worker_id, handle, port in launched:
            worker_repo.mark_launched(s, worker_id, handle, now, port)
            if handle.power_note:  # what its node did with its GPUs' power, or could not (issue 33)
                job_repo.add_job_event(s, job_id, now, "power", handle.power_note)
            setting = (powers or {}).get(worker_id)
            if setting is not None:  # what a power budget counts its GPUs at (issue 33)
                worker_repo.set_gpu_power(s, worker_id, setting)
        for worker_id, message in failed:
            worker_repo.record_exit(s, worker_id, None, True, now, reason="its launch failed")
            job_repo.add_job_event(s, job_id, now, "launch_failed", message)


class _Finish(NamedTuple):
    """What a start's last write records: the launches and starting -> running (``_finish_start``)."""

    job_id: int
    attempt: int
    launched: list[tuple[int, WorkerHandle, int | None]]
    failed: list[tuple[int, str]]
    in_image: bool
    powers: Mapping[int, PowerSetting | None] | None


def _capped(setting: PowerSetting | None, cap: float | None) -> PowerSetting | None:
    """The lower of a job's resolved setting and the power budget's cap: a cap is a limit, and a
    clock lock under a cap becomes the cap (a lock bounds clocks, not watts)."""
    if cap is None:
        return setting
    if setting is not None and setting.kind == "limit" and setting.value <= cap:
        return setting
    return PowerSetting("limit", int(cap))

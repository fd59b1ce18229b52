"""The node runtime: one per node, the same code under the local and the Ray executor.

It launches each worker under a supervisor (``node/supervisor.py``) in a session of its own,
and learns about exits only from what the supervisor recorded on disk. That makes the head
restartable: a new runtime over the same directory re-adopts whatever is still running.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpupool.clock import Clock, SystemClock
from gpupool.domain.launch import ImagePhase, LaunchRequest, Stats, WorkerExit, WorkerHandle
from gpupool.domain.nodes import GpuInfo, Node, NodeState
from gpupool.domain.telemetry import GpuSample
from gpupool.node import accounts, container, gpu_share, image_start, leftovers, log_cap, private, rundir, zygote
from gpupool.node.cached_images import CachedImages
from gpupool.node.gpu.probe import GpuProbe
from gpupool.node.image_job import read_phase
from gpupool.node.jobns import Scratch
from gpupool.node.power import NodePower
from gpupool.node.walls import NodeWalls, confinement

DEFAULT_IMAGE_CACHE_BYTES = 200 * 2**30  # gpupool up --image-cache


class NodeRuntime:
    def __init__(
        self,
        *,
        name: str,
        address: str,
        probe: GpuProbe,
        data_dir: Path,
        base_env: Mapping[str, str],
        cpus: int,
        memory_mib: int,
        host_cpus: Sequence[int],
        python: str = sys.executable,
        lease_timeout_s: float | None = None,
        detach: bool = False,
        clock: Clock | None = None,
        cgroups_wanted: bool = True,
        max_log_bytes: int = log_cap.DEFAULT_MAX_LOG_BYTES,
        image_cache_bytes: int = DEFAULT_IMAGE_CACHE_BYTES,
        device_dir: Path = Path("/dev"),
    ) -> None:
        self.name = name
        self.address = address
        self.data_dir = data_dir
        self._probe = probe
        self._gpus: list[GpuInfo] | None = None
        self._base_env = dict(base_env)
        self._cpus = cpus
        self._memory_mib = memory_mib
        self._host_cpus = tuple(host_cpus) or (0,)
        self._python = python
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        # Self-fencing (Ray backend): supervisors stop their workers when this file goes stale.
        self._lease_timeout_s = lease_timeout_s
        self.lease_path = data_dir / rundir.LEASE
        # Detached supervisors are nobody's child: a host that kills its children on exit
        # (a Ray worker does) cannot take them down.
        self._detach = detach
        self._launching: dict[str, subprocess.Popen[bytes]] = {}
        self._zygote = zygote.Zygote(data_dir, python, self._supervisor_env())  # supervisors without a Python start
        self._clock = clock or SystemClock()
        # Each worker in a cgroup of its own where the node can make them (root, a cgroup fs):
        # named by node and data dir, so two heads' virtual nodes on one machine never share one.
        self.layout = confinement(cgroups_wanted)
        self._gpu_watch = gpu_share.GpuShareWatch(probe, self.layout)
        self._log_cap = log_cap.LogCap(max_log_bytes)
        self.image_cache_bytes = image_cache_bytes  # its images' cache (images/ in its data dir) stays under this
        self._driver_files = container.driver_files()  # bound into every image's root (NVIDIA's CDI rule)
        digest = hashlib.sha1(str(data_dir.resolve()).encode()).hexdigest()[:8]
        self.walls = NodeWalls(self.layout, f"{re.sub(r'[^A-Za-z0-9._-]', '_', name)[:100]}.{digest}", device_dir)
        self.as_owners = self.walls.as_owners  # root runs each job as its owner's account
        self.scratch_why = self.walls.scratch_why  # None: each job gets a private /tmp, /dev/shm, /proc
        self.netwall = self.walls.netwall  # None: jobs may connect to each other's ports
        self.image_cache = CachedImages(name, data_dir / "images", image_cache_bytes, self.walls)  # gpupool images
        self._uid_min = accounts.uid_min()  # the machine's UID_MIN, read once, not on every launch
        self.power = NodePower(name, probe, data_dir, self._gpu_list)  # its jobs' GPU power; a dead runtime's undone
        self.power.recover()

    def describe(self) -> Node:
        return Node(
            self.name,
            NodeState.UP,
            self.address,
            tuple(self._gpu_list()),
            self._cpus,
            self._memory_mib,
            isolation={**self.walls.isolation(), **self.image_cache.isolation()},
        )

    def _gpu_list(self) -> list[GpuInfo]:  # the probe is asked once
        if self._gpus is None:
            self._gpus = self._probe.gpus()
        return self._gpus

    def sample(self, busy: Collection[int]) -> list[GpuSample]:
        """A telemetry reading of every GPU of the node, stamped with the node's clock. ``busy``:
        the GPU indices its live workers hold (the head knows; simulated GPUs follow it)."""
        return self._probe.sample(self.name, frozenset(busy), self._clock.now())

    def calibrate_power(self, bound_s: float, busy: Collection[int]) -> list[dict[str, Any]]:
        """``gpupool node calibrate-power`` here: each GPU model's curve (``node/power_calibrate.py``)."""
        return self.power.calibrate(bound_s, busy, self._clock)

    def free_port(self) -> int:
        with socket.socket() as sock:
            sock.bind((self.address, 0))
            return int(sock.getsockname()[1])

    def log_path(self, job_id: int, worker: int) -> Path:
        return self.data_dir / "logs" / f"job-{job_id}" / f"worker-{worker}.log"

    def run_dir(self, job_id: int, attempt: int, worker: int) -> Path:
        return rundir.run_dir(self.data_dir, job_id, attempt, worker)

    def _image(
        self,
        req: LaunchRequest,
        env: dict[str, str],
        confined: dict[str, Any],
        account: accounts.Account | None,
        scratch: Scratch | None,
    ) -> dict[str, Any]:
        """The image part of a worker's spec (``image_start.spec_part``)."""
        place = image_start.NodePlace(
            self.walls.device_dir, self._driver_files, self.data_dir, self.image_cache_bytes, tuple(self._base_env)
        )
        return image_start.spec_part(req, env, confined, account, scratch, place)

    def find(self, job_id: int, attempt: int, worker: int) -> WorkerHandle | None:
        """The handle of a worker launched by a head that died before recording it, if any."""
        run_dir = self.run_dir(job_id, attempt, worker)
        return None if (pid := rundir.read_pid(run_dir)) is None else WorkerHandle(pid, str(run_dir))

    def launch(self, req: LaunchRequest) -> WorkerHandle:
        # Run dir and log stay the runtime's, 0700/0600, even when the job runs as its owner: a job
        # that could write its supervisor's records (the worker's process group) could make root
        # signal any process. Its owner reads the log through the head.
        run_dir = private.private_dir(self.run_dir(req.job_id, req.attempt, req.worker), below=self.data_dir)
        log = self.log_path(req.job_id, req.worker)
        private.private_dir(log.parent, below=self.data_dir)
        private.private_file(log)
        env = dict(self._base_env)
        account = None
        if req.run_as is not None and self.as_owners:
            account = accounts.lookup(req.run_as)
            if account is None:
                why = f"no Unix account {req.run_as!r} on node {self.name}: an admin creates it, or maps the user"
                rundir.refuse(run_dir, log, req.header, why, NO_ACCOUNT)
                return WorkerHandle(0, str(run_dir))
            if not req.allow_system_account and (system := accounts.system_account(account, self._uid_min)):
                why = f"{system} on node {self.name}; {accounts.SYSTEM_HINT}"
                rundir.refuse(run_dir, log, req.header, why, SYSTEM_ACCOUNT)
                return WorkerHandle(0, str(run_dir))
            env.update(account.env())
        env.update(req.env)
        # The node's own GPU indices; renumbered from 0 below where the node walls device files.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in req.gpus)
        gpu, limit = self._gpu_limit(req)
        if limit and gpu_share.mps_running(self._base_env):
            env.update(gpu_share.mps_env(limit))
        gpus = list(req.gpus)
        confined = self.walls.cgroup(req.job_id, req.attempt, req.worker, gpus)
        env.update(self.walls.cuda_env(confined, gpus, env))
        kept = [req.workdir, req.env.get("GPUPOOL_CHECKPOINT_DIR")]
        if req.image is not None:  # its root is found there after the private /tmp hid the host's (a node under /tmp)
            os.makedirs(self.data_dir / "images", mode=0o711, exist_ok=True)  # a path kept must exist
            kept.append(str(self.data_dir / "images"))
        scratch = self.walls.scratch(run_dir.parent, req.memory_mib, kept, account, self._base_env)
        if scratch is not None and "TMPDIR" not in req.env:
            env.pop("TMPDIR", None)  # the head's, elsewhere: the job's temporary files belong in its own /tmp
        image = self._image(req, env, confined, account, scratch) if req.image is not None else {}
        spec = rundir.RunSpec(
            argv=req.argv,
            env=env,
            cwd=req.workdir,
            log=str(log),
            cpus=tuple(sorted({self._host_cpus[c % len(self._host_cpus)] for c in req.cpus})),
            memory_mib=req.memory_mib,
            cpu_milli=req.cpu_milli,
            grace_s=req.grace_s,
            header=req.header,
            lease=None if self._lease_timeout_s is None else rundir.Lease(str(self.lease_path), self._lease_timeout_s),
            account=account,
            scratch=scratch,
            **confined,
            **image,
        )
        spec_path = run_dir / rundir.SPEC
        private.write_private(spec_path, spec.to_json())
        port = self.walls.worker_started(spec.cgroup, req.job_id, req.port, run_dir)
        power = self.power.started(str(run_dir), req.gpus, req.gpu_power) if req.gpus else None  # before it runs
        # Kept in the store: a restarted head hands the limit back and the watch goes on, and the
        # port it serves is walled again by a restarted head's runtime.
        handle = WorkerHandle(
            0, str(run_dir), gpu if limit else None, limit, req.job_id if port else None, port or None, power
        )
        if not self._detach and (pid := self._zygote.spawn(spec_path)):
            return replace(handle, pid=pid)
        detach = ["--detach"] if self._detach else []
        try:
            err_fd = os.open(run_dir / rundir.SUPERVISOR_ERR, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with open(err_fd, "wb") as err:
                child = subprocess.Popen(
                    [self._python, "-m", "gpupool.node.supervisor", str(spec_path), *detach],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    start_new_session=True,
                    close_fds=True,
                    env=self._supervisor_env(),
                )
        except BaseException:
            self.walls.release(run_dir, handle)  # no worker will run: its port and group are not its job's
            self.power.ended(str(run_dir))
            raise
        if self._detach:
            # Not waited for: the first process exits once it has forked the supervisor and
            # written its pid (a Python start, ~0.1 s); pid 0 in the handle means "read it there".
            self._launching[str(run_dir)] = child
            threading.Thread(target=child.wait, name="gpupool-reap", daemon=True).start()
            return handle
        self._children[child.pid] = child
        (run_dir / rundir.SUPERVISOR_PID).write_text(str(child.pid))
        return replace(handle, pid=child.pid)

    def _supervisor_env(self) -> dict[str, str]:
        """The supervisor's own environment (its worker's is the spec's): where gpupool's code is,
        so a head run from a source tree (``PYTHONPATH=src``) starts supervisors too."""
        return {**self._base_env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def _gpu_limit(self, req: LaunchRequest) -> tuple[int | None, int]:
        """The shared GPU of a fractional worker and the most of its memory the worker may hold."""
        if not req.gpu_share or len(req.gpus) != 1:
            return None, 0
        total = next((g.memory_mib for g in self._gpu_list() if g.index == req.gpus[0]), 0)
        return req.gpus[0], gpu_share.share_limit_mib(req.gpu_share, req.gpu_memory_mib, total)

    def poll(self, handle: WorkerHandle) -> WorkerExit | None:
        """None while the worker runs; its exit once the supervisor recorded one."""
        run_dir = Path(handle.run_dir)
        recorded = _read_exit(run_dir)
        pid = self._pid(handle)
        if recorded is not None:
            self.walls.release(run_dir, handle)
            self.power.ended(str(run_dir))  # its GPUs back to what their other workers allow
            self._reap(pid)
            self._gpu_watch.forget(str(run_dir))
            self._log_cap.check(handle, final=True)
            self._log_cap.forget(str(run_dir))
            return recorded
        if pid is None or self._supervisor_alive(pid, run_dir):
            self.walls.adopt(run_dir, handle)
            self._gpu_watch.check(handle)
            self._log_cap.check(handle)
            return None
        self.walls.release(run_dir, handle)  # it ended either way: its port and group are no longer its
        self.power.ended(str(run_dir))
        recorded = _read_exit(run_dir)  # it may have written its record just before exiting
        if recorded is not None:
            return recorded
        leftovers.kill_worker_group(run_dir, signal.SIGKILL)
        return WorkerExit(exit_code=None, lost=True)

    def kill(self, handle: WorkerHandle) -> None:
        """SIGTERM to the supervisor, which escalates to SIGKILL after the grace period."""
        run_dir = Path(handle.run_dir)
        starting = self._launching.get(str(run_dir))
        if starting is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                starting.wait(timeout=10)  # learn the supervisor's pid before signalling it
        pid = self._pid(handle) or 0
        if pid and self._supervisor_alive(pid, run_dir):
            leftovers.signal_pid(pid, signal.SIGTERM)
        else:
            leftovers.kill_worker_group(run_dir, signal.SIGKILL)

    def usage(self, handles: Sequence[WorkerHandle]) -> list[Stats | None]:
        """What each worker's cgroup says it uses (None for one without a cgroup)."""
        return [gpu_share.worker_stats(Path(h.run_dir), self.layout) for h in handles]

    def image_phases(self, handles: Sequence[WorkerHandle]) -> list[ImagePhase | None]:
        """Where each worker's supervisor is with its image (``node/image_job.py``)."""
        return [read_phase(Path(h.run_dir)) for h in handles]

    def forget(self, job_ids: Sequence[int]) -> int:
        """Delete the run directories and logs of jobs the head pruned; how many had any here."""
        removed = sum(rundir.remove_job(self.data_dir, job_id) for job_id in job_ids)
        self.power.ended()  # a worker whose end was never polled is gone with its run dir
        return removed

    def log_sizes(self) -> dict[int, int]:
        """The bytes of every job's logs on this node (``--max-user-logs``)."""
        return log_cap.job_log_sizes(self.data_dir)

    def empty_logs(self, job_ids: Sequence[int], note: str) -> int:
        """Replace the logs of finished jobs by ``note``; the bytes freed."""
        return sum(log_cap.empty_job_logs(self.data_dir, job_id, note) for job_id in job_ids)

    def read_log(self, job_id: int, worker: int, offset: int = 0, limit: int = 1 << 20) -> bytes:
        return rundir.read_log(self.log_path(job_id, worker), offset, limit)

    def lease_expired(self, timeout_s: float) -> bool:
        return rundir.lease_expired(self.lease_path, timeout_s)

    def renew_lease(self) -> None:
        """Say "this node is still part of the cluster" to the supervisors of its workers."""
        self.lease_path.parent.mkdir(parents=True, exist_ok=True)
        self.lease_path.touch()

    def clean(self) -> int:
        """Stop every worker left over from before this runtime started (a node that comes back
        after it was declared dead): its jobs were already counted lost and requeued elsewhere."""
        note = "stopped when the node came back: the job was requeued elsewhere"
        stopped = leftovers.stop_leftovers(self.data_dir, note)
        self.power.ended()
        return stopped

    def protect(self, endpoints: Sequence[tuple[str, int, int]]) -> None:
        """The ports other nodes' jobs serve (address, port, job id), refused to this node's jobs."""
        if self.netwall is not None:
            self.netwall.protect(endpoints)

    def close(self) -> None:
        """Forget the children without killing them: a restarted head re-adopts them."""
        self.walls.close()
        self._zygote.close()
        for child in self._children.values():
            child.returncode = 0  # stop Popen.__del__ from warning about a running child
        self._children.clear()

    def _pid(self, handle: WorkerHandle) -> int | None:
        """The supervisor's pid; None while a detached one is still being started."""
        if handle.pid:
            return handle.pid
        run_dir = handle.run_dir
        starting = self._launching.get(run_dir)
        if starting is not None and starting.poll() is None:
            return None
        self._launching.pop(run_dir, None)
        pid = rundir.read_pid(Path(run_dir))
        return 0 if pid is None else pid  # 0: it never started, seen as lost

    def _reap(self, pid: int | None) -> None:
        if pid is None:
            return
        child = self._children.pop(pid, None)
        if child is not None:
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._children[pid] = child

    def _supervisor_alive(self, pid: int, run_dir: Path) -> bool:
        child = self._children.get(pid)
        if child is not None:
            return child.poll() is None
        return rundir.supervisor_running(pid, run_dir)


NO_ACCOUNT = "no_unix_account"  # exit reason of a worker whose owner has no account on its node
IMAGE_UNAVAILABLE = "image_unavailable"  # the node could not get its image now: the job waits (exit_reasons.py)
IMAGE = "image"  # exit reason of a worker whose image the node could not get or use (domain/exit_reasons.py)
SYSTEM_ACCOUNT = "system_account"  # exit reason of a worker that would have run as root or a system account


def _read_exit(run_dir: Path) -> WorkerExit | None:
    record = rundir.read_exit(run_dir)
    if record is None:
        return None
    if record.lost:
        # Stopped by the node itself (self-fencing, or cleaned on return): the head sees it lost.
        return WorkerExit(exit_code=None, lost=True)
    stopped = rundir.read_stop(run_dir)  # the runtime stopped it (over its GPU memory): that is why
    reason = stopped.reason if stopped else record.reason
    # The note is the node's sentence on why; the head shows it where the reason alone says too little.
    return WorkerExit(
        exit_code=record.exit_code,
        reason=reason,
        note=record.note if reason in (IMAGE, IMAGE_UNAVAILABLE) else None,
        image_digest=record.image_digest,
    )

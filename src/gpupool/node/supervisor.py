"""The small supervisor that owns one worker process.

Started by the node runtime in a session of its own, so it outlives a head that is killed:
it records the worker's exit status in ``exit.json`` (written atomically) and turns a SIGTERM
into SIGTERM-to-the-worker's-process-group, then SIGKILL after the grace period. A restarted
head reads what it recorded. Standard library only: it starts on every launch, so it must be cheap.

Self-fencing (Ray backend): the spec may name a lease file that the node runtime touches while
its node is part of the cluster. When the lease is older than ``lease_timeout_s`` the node has
been cut off (or its runtime died) and the head has given, or is about to give, this worker's
job to other nodes: the supervisor stops the worker at once and records it as fenced, so a
requeued gang never runs twice.

What it reads and writes in the run directory (the spec, its pid, the worker's process group,
the exit record) and the lease rule are defined once, in ``node/rundir.py``.

Exit codes follow the shell: 128+N for a worker ended by signal N, 127 when the command does not
exist, 126 when it cannot be run (not executable, missing working directory).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from gpupool.node import cgroups, container, jobns, rundir
from gpupool.node.accounts import Account


def main(spec_path: str) -> int:
    _hear_early_stops()
    run = Path(spec_path).parent
    spec = rundir.RunSpec.from_json(Path(spec_path).read_text())
    if rundir.read_pid(run) != os.getpid():
        rundir.write_pid(run, os.getpid())
    with open(spec.log, "ab", buffering=0) as log:
        log.write((spec.header + "\n").encode())
        hold, digest = None, None
        if spec.image is not None and spec.container is not None:
            # Only now: the image cache costs ~20 ms of imports that a worker without an image never pays.
            from gpupool.node import image_start
            from gpupool.node.images import ImageError, ImageUnavailable

            try:
                started = image_start.start(spec.image, spec.argv, dict(spec.env), spec.cwd, spec.account, log, run)
            except ImageError as exc:  # the worker never starts: the head reads why in its events
                log.write(f"gpupool: {exc}; not starting the worker\n".encode())
                note = str(exc)
                why = "image_unavailable" if isinstance(exc, ImageUnavailable) else "image"  # it waits, or fails
                rundir.write_exit(run, rundir.ExitRecord(125, note=note, finished_at=_now(), reason=why))
                rundir.ring(run)
                return 0
            hold, digest = started.hold, started.digest
            box = spec.container._replace(root=started.root)
            spec = spec._replace(argv=started.argv, env=started.env, cwd=started.cwd, container=box)
        group = _group(spec, log)
        reason = None
        try:
            code, fenced = _run(spec, run, log, group) if group is not False else (126, False)
        finally:
            if group:
                reason = _teardown(group, spec, log)
    unentered = _image_failure(spec) if code == 126 and spec.container is not None else None
    reason = "image" if unentered else reason  # its image's root could not be entered: the image's fault
    record = rundir.ExitRecord(
        code, fenced=fenced, note=unentered, finished_at=_now(), reason=reason, image_digest=digest
    )
    if hold is not None:
        os.close(hold)  # the image may be evicted once no worker runs in it
    rundir.write_exit(run, record)
    rundir.ring(run)
    return 0


def _image_failure(spec: rundir.RunSpec) -> str | None:
    """What the worker said when it could not enter its image's root (the child writes the step
    that failed to the log, then exits), or None when something else stopped it."""
    try:
        with open(spec.log, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            tail = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    said = [line for line in tail if "entering its image's root" in line]
    return said[-1].removeprefix("gpupool: ") if said else None


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _group(spec: rundir.RunSpec, log: Any) -> cgroups.WorkerGroup | Literal[False] | None:
    """The worker's cgroup, made with its limits; None without one; False when the node has
    cgroups but this one could not be made: the worker is not started unconfined."""
    if spec.cgroup is None:
        return None
    limits = cgroups.Limits(
        spec.memory_mib,
        spec.cpus,
        spec.pids_max,
        spec.devices_allow,
        spec.devices_deny,
        spec.cpu_milli,
        spec.devices_keep,
    )
    try:
        group = spec.group()
        group.create(limits)
    except (cgroups.CgroupError, ValueError, OSError) as exc:
        log.write(f"gpupool: cannot confine the worker ({exc}); not starting it\n".encode())
        return False
    return group


def _teardown(group: cgroups.WorkerGroup, spec: rundir.RunSpec, log: Any) -> str | None:
    """Kill whatever the worker left in its cgroup (setsid, double forks, nohup), wait until the
    group is empty, so its GPUs are handed out only once nothing of it runs, and say whether the
    memory limit killed it."""
    group.kill()
    if not group.wait_empty(timeout=10):
        log.write(f"gpupool: processes of this worker outlived it: {sorted(group.pids())}\n".encode())
    oom = group.oom_killed()
    if oom:
        log.write(f"gpupool: the worker ran out of memory: its limit is {spec.memory_mib} MiB (--memory)\n".encode())
    group.remove()
    return "oom" if oom else None


def _run(spec: rundir.RunSpec, run: Path, log: Any, group: cgroups.WorkerGroup | None) -> tuple[int, bool]:
    cwd = spec.cwd
    if cwd is None and spec.account is not None:
        # Not the head's working directory, which its owner may not even enter: their home.
        cwd = spec.account.home if os.path.isdir(spec.account.home) else "/"
    if cwd and spec.container is None and not os.path.isdir(cwd):  # in an image: checked inside its root
        log.write(f"gpupool: working directory {cwd} does not exist on this node\n".encode())
        return 126, False
    lease = None if spec.lease is None else _Lease(spec.lease)
    if lease is not None and lease.expired():
        log.write(f"gpupool: {lease.why()}; not starting the worker\n".encode())
        return 128 + signal.SIGTERM, True
    killer = _Killer(spec.grace_s)
    if killer.requested:
        return 128 + signal.SIGTERM, False
    try:
        child = subprocess.Popen(
            list(spec.argv),
            env=dict(spec.env),
            cwd=cwd if spec.container is None else None,  # in an image, entered inside its root (_limits)
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            preexec_fn=_limits(
                list(spec.cpus), spec.memory_mib, group, spec.account, cwd, spec.scratch, spec.container
            ),
        )
    except subprocess.SubprocessError:  # a wall, the account or the directory: said in the log by the child
        return 126, False
    except FileNotFoundError:
        log.write(f"gpupool: command not found: {spec.argv[0]}\n".encode())
        return 127, False
    except PermissionError as exc:
        where = f" as {spec.account.name} in {cwd or os.getcwd()}" if spec.account is not None else ""
        log.write(f"gpupool: cannot run {spec.argv[0]}{where}: {exc.strerror}\n".encode())
        return 126, False
    killer.attach(child.pid)
    rundir.write_child(run, rundir.ChildRecord(pid=child.pid, pgid=child.pid))
    fenced = False
    while True:
        try:
            status = child.wait(timeout=None if lease is None else lease.check_every_s)
            break
        except subprocess.TimeoutExpired:
            if lease is not None and not fenced and lease.expired():
                fenced = True
                log.write(f"gpupool: {lease.why()}; stopping the worker (self-fencing)\n".encode())
                # Short grace: the job is being restarted elsewhere and must not run twice.
                killer.grace_s = min(killer.grace_s, lease.timeout_s / 4)
                killer.fence()
    _kill_group(child.pid, signal.SIGKILL)  # leftovers in the worker's group die with it
    return (128 - status if status < 0 else status), fenced


class _Lease:
    def __init__(self, lease: rundir.Lease) -> None:
        self.path = lease.path
        self.timeout_s = max(lease.timeout_s, 0.1)
        self.check_every_s = min(0.5, self.timeout_s / 4)

    def expired(self) -> bool:
        return rundir.lease_expired(self.path, self.timeout_s)

    def why(self) -> str:
        return f"this node lost contact with the cluster for more than {self.timeout_s:g}s"


def _limits(
    cpus: list[int],
    memory_mib: int,
    group: cgroups.WorkerGroup | None,
    account: Account | None,
    cwd: str | None,
    scratch: jobns.Scratch | None = None,
    image: container.ContainerSpec | None = None,
) -> Any:
    """Between fork and exec: into the cgroup first (which holds memory, cores and processes),
    else the per-process limits, which a job can escape (a child's own affinity, a shared mapping);
    then into the job's private /tmp, /dev/shm and /proc, and its image's root (built by the worker
    that made the namespace; a gang member joining it is in that root already); last, down to the
    owner's account, once nothing left needs root."""

    def apply() -> None:
        step = "entering its cgroup"
        try:
            if group is not None:
                group.add_self()
            step = "making its private /tmp and /dev/shm"
            created = jobns.enter(scratch) if scratch is not None else True
            if image is not None:
                step = f"entering its image's root {image.root}"
                if created:
                    container.enter(image, unshare=scratch is None)
                else:
                    container.joined(image)
                if cwd:
                    os.chdir(cwd)  # the same path, bound in the new root
            step = "pinning its cores"
            if cpus:
                os.sched_setaffinity(0, cpus)
            if memory_mib and group is None:
                # RLIMIT_DATA, not RLIMIT_AS: CUDA reserves large virtual ranges it never touches.
                limit = memory_mib * 2**20
                resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
            if account is not None:
                step = f"becoming {account.name}"
                account.become()
                step = f"entering {cwd} as {account.name}"
                if cwd:
                    os.chdir(cwd)  # again, as the owner (and in the job's namespace): Popen entered it as root
        except OSError as exc:  # stdout and stderr are the log already; the parent sees only a failure
            os.write(1, f"gpupool: cannot start the worker: {step} failed ({exc})\n".encode())
            raise

    return apply


_EARLY_STOPS: list[int] = []  # SIGTERM/SIGINT received before the _Killer was there to act on them


def _hear_early_stops() -> None:
    """Note a stop that comes while the supervisor is still starting (reading its spec, getting an
    image), instead of dying of it with no exit record: the worker would be seen lost, not
    stopped. The ``_Killer`` acts on it as soon as the worker has started. Installed first in
    ``__main__`` (before the detaching fork) and in ``main`` (the zygote's children)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: _EARLY_STOPS.append(signum))


class _Killer:
    """SIGTERM to the supervisor: SIGTERM to the worker's group, SIGKILL after the grace period.

    Installed before the worker starts, so a kill that races the launch is never lost."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = max(grace_s, 0.01)
        self.pgid: int | None = None
        self.requested = bool(_EARLY_STOPS)
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        signal.signal(signal.SIGALRM, self._on_alarm)

    def attach(self, pgid: int) -> None:
        self.pgid = pgid
        if self.requested:
            self._on_term(-1, None)

    def fence(self) -> None:
        self._on_term(-1, None)

    def _on_term(self, _signum: int, _frame: FrameType | None) -> None:
        first = not self.requested
        self.requested = True
        if self.pgid is not None and (first or _signum == -1):
            _kill_group(self.pgid, signal.SIGTERM)
            signal.setitimer(signal.ITIMER_REAL, self.grace_s)

    def _on_alarm(self, _signum: int, _frame: FrameType | None) -> None:
        if self.pgid is not None:
            _kill_group(self.pgid, signal.SIGKILL)


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _detach(spec_path: str) -> None:
    """Fork once more and let the parent exit: the supervisor is then nobody's child, so no
    host process (a Ray worker cleaning up its children as it dies) can take it down with it.
    The parent writes the pid before exiting, so whoever launched it knows whom to watch."""
    pid = os.fork()
    if pid > 0:
        rundir.write_pid(Path(spec_path).parent, pid)
        os._exit(0)


if __name__ == "__main__":
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _hear_early_stops()
    if len(sys.argv) > 2 and sys.argv[2] == "--detach":
        _detach(sys.argv[1])
    sys.exit(main(sys.argv[1]))

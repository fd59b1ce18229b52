"""What a node puts around each worker, found once when its runtime starts, and the same said
plainly for ``gpupool nodes``: the cgroup layout its workers are confined in (memory, cores, a
process limit, the GPUs' device files), the job's private namespace (``/tmp``, ``/dev/shm``,
``/proc``) and whose account a job runs as. The runtime asks it for the walls part of each
worker's spec; the supervisor puts them up."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpupool.domain.launch import WorkerHandle
from gpupool.node import accounts, cgroups, gpu_share, jobns, rundir
from gpupool.node.netwall import NetWall

log = logging.getLogger("gpupool.node")

PIDS_MAX = 4096  # processes and threads per worker: room for data loaders, not for a fork bomb
_GPU_DEV = re.compile(r"nvidia(\d+)")


class NodeWalls:
    def __init__(self, layout: cgroups.Layout | None, cgroup_node: str, device_dir: Path = Path("/dev")) -> None:
        self.layout = layout
        self.cgroup_node = cgroup_node  # the node's level in the cgroup tree: two heads' nodes never share one
        self.as_owners = accounts.privileged()  # root runs each job as its owner's account
        # Each job in a mount namespace of its own where root can make one; else why not.
        self.scratch_why = jobns.usable() if self.as_owners else "not root: jobs share the node's /tmp and /dev/shm"
        self.hidepid = jobns.hidepid_usable()
        self.device_dir = device_dir  # where the GPUs' device files are (tests make stand-ins elsewhere)
        # A job's served port answers only its own job and what is outside the workers (the gateway).
        self.netwall: NetWall | None = None
        self._walled: dict[str, int | None] = {}  # run dir -> its group's id, of the workers the netwall knows
        self.network_why: str | None = "not root, or no cgroup v2 here: jobs may call each other's ports"
        node_group = None
        if layout is not None and layout.unified is not None:
            node_group = cgroups.ensure_group(layout.unified, f"{layout.parent}/{cgroup_node}")
        if node_group is not None:
            try:
                self.netwall, self.network_why = NetWall(node_group), None
            except OSError as exc:
                self.network_why = f"no cgroup connect program ({exc})"

    def isolation(self) -> dict[str, str]:
        said = isolation(self.layout, self.as_owners, self.scratch_why, self.hidepid)
        said["network"] = (
            "cgroup connect program (a job reaches no other job's replica or published port)"
            if self.netwall is not None
            else f"none ({self.network_why})"
        )
        return said

    def worker_started(self, cgroup_rel: str | None, job_id: int, port: int | None, run_dir: Path) -> int | None:
        """Before a worker starts: its group made here (so its id is known now) and its job's, and
        the port it will serve, if any, its job's alone; that port, or None where none is walled."""
        if self.netwall is None or cgroup_rel is None or self.layout is None or self.layout.unified is None:
            return None
        self._walled[str(run_dir)] = None
        group = cgroups.ensure_group(self.layout.unified, f"{self.layout.parent}/{cgroup_rel}")
        try:
            if group is not None:
                self._walled[str(run_dir)] = self.netwall.worker(group, job_id)
        except OSError as exc:  # its own served port will refuse it too; nobody else's changes
            log.warning("the port wall does not know worker %s of job %s: %s", run_dir.name, job_id, exc)
        if not port or not _free(port):
            return None  # a port something else listens on already (the head's API?) is not the job's
        self.netwall.serve(port, job_id)
        return port

    def adopt(self, run_dir: Path, handle: WorkerHandle) -> None:
        """A running worker this runtime did not launch (a head restarted): walled as at its launch."""
        if self.netwall is None or self.layout is None or self.layout.unified is None or str(run_dir) in self._walled:
            return
        with contextlib.suppress(OSError, ValueError, KeyError):
            spec = rundir.read_spec(run_dir)
            job = int(run_dir.parents[1].name.removeprefix("job-"))  # .../runs/job-J/attempt-A/worker-W
            self._walled[str(run_dir)] = None
            if spec.cgroup:
                group = os.path.join(self.layout.unified, self.layout.parent, spec.cgroup)
                self._walled[str(run_dir)] = self.netwall.worker(group, job)
            if handle.port:  # walled at its launch: its server may be listening on it now
                self.netwall.serve(handle.port, job)

    def release(self, run_dir: Path, handle: WorkerHandle) -> None:
        """The worker ended: its group and its port are no longer its job's."""
        if self.netwall is None:
            return
        group_id = self._walled.pop(str(run_dir), None)  # its group may be gone already: by the id kept
        if group_id is not None:
            self.netwall.forget_worker(group_id)
        if handle.port:
            self.netwall.stop_serving(handle.port)

    def close(self) -> None:
        """Let go of the netwall's handles (its programs stay attached while workers run)."""
        if self.netwall is not None:
            self.netwall.close()

    def cgroup(self, job_id: int, attempt: int, worker: int, gpus: list[int]) -> dict[str, Any]:
        """The cgroup part of a worker's spec: its group, a process limit, and its GPUs' device
        files allowed and the node's other GPUs' denied (where ``nvidiaN`` files exist), with the
        driver's own files (``nvidiactl``, ``nvidia-uvm``...) kept open for a device program."""
        if self.layout is None:
            return {}
        present = {
            int(m.group(1)): str(p) for p in self.device_dir.glob("nvidia[0-9]*") if (m := _GPU_DEV.fullmatch(p.name))
        }
        keep = [str(p) for p in self.device_dir.glob("nvidia*") if not _GPU_DEV.fullmatch(p.name) and not p.is_dir()]
        keep += [str(p) for p in self.device_dir.glob("nvidia-caps/*")]
        return {
            "cgroup": f"{self.cgroup_node}/job-{job_id}-{attempt}-w{worker}",
            "pids_max": PIDS_MAX,
            "devices_allow": tuple(p for g, p in sorted(present.items()) if g in gpus),
            "devices_deny": tuple(p for g, p in sorted(present.items()) if g not in gpus),
            "devices_keep": tuple(sorted(keep)) if present else (),
            "device_program": self.layout.device_program,
        }

    def cuda_env(self, confined: Mapping[str, Any], gpus: list[int], env: Mapping[str, str]) -> dict[str, str]:
        """What CUDA is told where the node walls its GPUs' device files: CUDA and NVML count only
        the devices a process can open, so the worker's GPUs are devices 0..n-1 to it, in PCI order,
        as under Slurm's ConstrainDevices (``GPUPOOL_GPUS`` keeps the node's own indices)."""
        walled = self.layout is not None and self.layout.mechanism("devices") != "none"
        if not walled or not confined.get("devices_allow"):
            return {}
        renumbered = {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(gpus)))}
        if "CUDA_DEVICE_ORDER" not in env:  # CUDA's own order is fastest first
            renumbered["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        return renumbered

    def scratch(
        self,
        job_dir: Path,
        memory_mib: int,
        kept: list[str | None],
        account: accounts.Account | None,
        base_env: Mapping[str, str],
    ) -> jobns.Scratch | None:
        """The worker's private /tmp, /dev/shm and /proc, where this node can make them: each tmpfs
        bounded by its memory limit (else half the node's memory), with the host paths under /tmp
        it was started with (``kept``, and the MPS daemon's pipe directory) bound in."""
        if self.scratch_why is not None:
            return None
        size = memory_mib * 2**20 if memory_mib else os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
        mps = base_env.get("CUDA_MPS_PIPE_DIRECTORY") or gpu_share.DEFAULT_MPS_PIPE
        uid, gid = (account.uid, account.gid) if account is not None else (os.geteuid(), os.getegid())
        return jobns.Scratch(str(job_dir), size, uid, gid, jobns.kept([*kept, mps]), self.hidepid)


def _free(port: int) -> bool:
    """Whether nothing listens on ``port`` yet: only a port the job can still take becomes its."""
    if not 1024 <= port <= 65535:
        return False  # a privileged port is the machine's, not a job's
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def isolation(
    layout: cgroups.Layout | None, as_owners: bool, scratch_why: str | None = "", hidepid: bool = False
) -> dict[str, str]:
    """What this node enforces around each job, said plainly: the cgroup mechanisms where workers
    get a group; otherwise the per-process limits, with how a job gets past them. ``scratch_why``:
    None where each job gets a private namespace, else why it does not."""
    users = "setuid (each job runs as its owner's Unix account)"
    if as_owners and accounts.me() == "root":
        users = "setuid (each job runs as its owner's Unix account; the built-in admin's as root)"
    if not as_owners:
        users = f"none (single-user: every job runs as {accounts.me()})"
    private = _private(scratch_why, hidepid)
    if layout is not None:
        walls = layout.isolation()
        if walls["devices"] == "none":
            walls["devices"] = "none (CUDA_VISIBLE_DEVICES only: " + _why_not(layout, "devices") + ")"
        return {"users": users, **walls, **private}
    return {
        "users": users,
        "memory": "rlimit data, per process (a shared mapping or a child escapes it)",
        "cpus": "affinity (a job can widen it)",
        "cpu quota": "none (a fraction of a core is not held to it)",
        "devices": "none (CUDA_VISIBLE_DEVICES only)",
        "kill": "process group (a new session escapes it)",
        **private,
    }


def confinement(wanted: bool = True) -> cgroups.Layout | None:
    """The cgroup layout workers are confined in, or None: not wanted, not root (only root may
    make groups and move processes into them), or no hierarchy where gpupool can make its group."""
    if not wanted or os.geteuid() != 0:
        return None
    try:
        layout = cgroups.detect()
    except OSError:
        return None
    return layout if any(v != "none" for v in layout.isolation().values()) else None


def _private(scratch_why: str | None, hidepid: bool) -> dict[str, str]:
    if scratch_why is not None:
        why = scratch_why or "no mount namespace"
        return {"tmp": f"none (shared /tmp and /dev/shm: {why})", "proc": f"none (every process visible: {why})"}
    proc = "hidepid=2 (a job sees only its own account's processes)"
    if not hidepid:
        proc = "none (this kernel shares one set of /proc options: Linux 5.8 or newer hides them)"
    tmp = "private /tmp and /dev/shm per job (tmpfs in a mount namespace, counted in its memory, gone at its end)"
    return {"tmp": tmp, "proc": proc}


def _why_not(layout: cgroups.Layout, what: str) -> str:
    said = [n.split(": ", 1)[1] for n in layout.notes if n.startswith(what + ": ")]
    return "; ".join(said) or "no devices controller or device program"

"""Start a throw-away Slurm cluster on this machine, and take it all down again.

``running_slurm()`` installs Debian's ``slurm-wlm`` and ``munge`` if they are missing, writes a
``slurm.conf`` and a ``gres.conf`` into a fresh temporary directory, makes stand-in GPU device files
there (``mknod ... c 1 3``, which behave like /dev/null), starts ``munged`` (as the munge user, on
its own socket), ``slurmctld`` and one ``slurmd -N NAME`` per logical node (each on its own port),
waits until ``sinfo`` shows every node idle, and yields a ``SlurmCluster``. On exit, whatever
happened, it cancels every job, asks ``scontrol shutdown``, kills what is left (daemons, job steps,
job processes: everything whose environment names this cluster's ``slurm.conf``), stops munged
and removes the directory.

Needs root (munged runs as munge, device files need mknod). What this takes from the machine
facts: no cgroup plugins (``proctrack/linuxproc``, ``task/none``, no cgroup.conf), and
``SlurmdParameters=config_overrides`` so a node may declare more CPUs than the machine has.

The daemons run in the foreground (``-D``, ``-F``) as children of this process, in sessions of
their own so a Ctrl-C reaches only the benchmark, which then tears down in order. This process
makes itself a child subreaper, so the job steps Slurm daemonises are reaped here rather than left
as zombies under a PID 1 that may not reap (as on the development VM).

    python benchmarks/slurm/cluster.py     # start one and keep it up until Ctrl-C (to poke at it)
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo")
PACKAGES = ("slurm-wlm", "munge")
MUNGE_USER = "munge"
PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class SlurmLayout:
    """What the cluster declares: nodes, GPUs per node, and CPUs and memory per node."""

    nodes: tuple[str, ...] = ("n1", "n2")
    gpus_per_node: int = 4
    cpus_per_node: int = 16
    memory_mb: int = 4000
    def_mem_per_cpu_mb: int = 100  # without it a job takes a node's whole memory
    partition: str = "bench"


@dataclass
class SlurmCluster:
    root: Path
    layout: SlurmLayout
    env: dict[str, str]  # os.environ plus SLURM_CONF: pass it to every Slurm command
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def run(self, *argv: str, timeout: float = 30.0) -> str:
        """Run a Slurm command against this cluster; its stdout, or an error with its stderr."""
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[:500]}")
        return done.stdout

    def queued(self) -> int:
        """Jobs Slurm still knows as pending, running or ending (an array counts once per line)."""
        return len([line for line in self.run("squeue", "-h", "-o", "%i").splitlines() if line.strip()])

    def cancel_all(self, timeout: float = 30.0) -> None:
        """Cancel every job and wait until squeue shows none."""
        self.run("scancel", f"--user={pwd.getpwuid(os.getuid()).pw_name}")
        deadline = time.monotonic() + timeout
        while self.queued():
            if time.monotonic() > deadline:
                raise RuntimeError(f"Slurm jobs still listed {timeout:g} s after scancel")
            time.sleep(0.1)


def slurm_conf(root: Path, host: str, ctld_port: int, node_ports: Sequence[int], layout: SlurmLayout) -> str:
    """The slurm.conf text: every path under ``root``, every node on ``host`` with its own port."""
    if len(node_ports) != len(layout.nodes):
        raise ValueError(f"{len(layout.nodes)} nodes but {len(node_ports)} ports")
    lines = [
        "ClusterName=bench",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool-%n'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd-%n.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SlurmdParameters=config_overrides",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        f"DefMemPerCPU={layout.def_mem_per_cpu_mb}",
        "GresTypes=gpu",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=defer_batch=0,sched_min_interval=0,batch_sched_delay=0",
        "MpiDefault=none",
        "ReturnToService=2",
        "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none",
    ]
    for name, port in zip(layout.nodes, node_ports, strict=True):
        lines.append(
            f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={layout.cpus_per_node} "
            f"RealMemory={layout.memory_mb} Gres=gpu:{layout.gpus_per_node} State=UNKNOWN"
        )
    lines.append(
        f"PartitionName={layout.partition} Nodes={','.join(layout.nodes)} Default=YES MaxTime=INFINITE State=UP"
    )
    return "\n".join(lines) + "\n"


def gres_conf(root: Path, layout: SlurmLayout) -> str:
    """The gres.conf text: no autodetection, each node's GPUs are its stand-in device files."""
    last = layout.gpus_per_node - 1
    lines = ["AutoDetect=off"]
    lines += [f"NodeName={name} Name=gpu File={root / 'dev' / name}/nvidia[0-{last}]" for name in layout.nodes]
    return "\n".join(lines) + "\n"


def parse_node_states(sinfo_output: str) -> dict[str, str]:
    """``sinfo -h -N -o '%N %t'`` lines to {node: short state}; a node listed twice keeps its last line."""
    states: dict[str, str] = {}
    for line in sinfo_output.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            states[parts[0]] = parts[1]
    return states


def parse_job_id(sbatch_parsable: str) -> str:
    """The job id from ``sbatch --parsable`` output (``123`` or ``123;cluster``)."""
    text = sbatch_parsable.strip().splitlines()[-1] if sbatch_parsable.strip() else ""
    job_id = text.split(";", 1)[0].strip()
    if not job_id.isdigit():
        raise ValueError(f"no job id in sbatch output {sbatch_parsable!r}")
    return job_id


def missing_programs() -> list[str]:
    return [name for name in PROGRAMS if shutil.which(name) is None]


def ensure_installed() -> None:
    """apt-get install the packages if one of the programs is missing (idempotent: nothing when all are there)."""
    if not missing_programs() and Path("/etc/munge/munge.key").exists():
        return
    if os.geteuid() != 0:
        missing = ", ".join(missing_programs())
        raise RuntimeError(f"{missing} missing and not root: apt-get install {' '.join(PACKAGES)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES]
    if subprocess.run(install, env=env, check=False).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, check=True)
        subprocess.run(install, env=env, check=True)
    if missing_programs():
        raise RuntimeError(f"still missing after apt-get: {', '.join(missing_programs())}")
    if not Path("/etc/munge/munge.key").exists():
        raise RuntimeError("no /etc/munge/munge.key after installing munge (run mungekey as the munge user)")


@contextlib.contextmanager
def running_slurm(
    layout: SlurmLayout | None = None, *, install: bool = True, ready_timeout: float = 60.0
) -> Iterator[SlurmCluster]:
    layout = layout or SlurmLayout()
    if install:
        ensure_installed()
    elif missing_programs():
        raise RuntimeError(f"Slurm is not installed ({', '.join(missing_programs())} missing); drop --skip-install")
    _become_subreaper()
    root = Path(tempfile.mkdtemp(prefix="slurm-bench-"))
    root.chmod(0o755)  # munged, as munge, must reach its socket directory
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    cluster = SlurmCluster(root, layout, env)
    logs: list[IO[bytes]] = []
    try:
        _write_files(root, layout)
        munge_dir = root / "munge"
        cluster.processes["munged"] = _start(
            ["munged", "-F", "-S", str(munge_dir / "munge.socket"), "--pid-file", str(munge_dir / "munged.pid"),
             "--log-file", str(munge_dir / "munged.log"), "--seed-file", str(munge_dir / "munged.seed")],
            root / "munged.out", env, logs, user=MUNGE_USER,
        )  # fmt: skip
        _wait_for(lambda: (munge_dir / "munge.socket").exists(), 10, "munged's socket", cluster)
        cluster.processes["slurmctld"] = _start(["slurmctld", "-D", "-i"], root / "slurmctld.out", env, logs)
        for name in layout.nodes:
            cluster.processes[f"slurmd {name}"] = _start(["slurmd", "-D", "-N", name], root / f"{name}.out", env, logs)
        _wait_for(lambda: _all_idle(cluster), ready_timeout, "every node idle in sinfo", cluster)
        yield cluster
    finally:
        _teardown(cluster)
        for log in logs:
            log.close()
        shutil.rmtree(root, ignore_errors=True)


def _write_files(root: Path, layout: SlurmLayout) -> None:
    for sub in ("state", "munge"):
        (root / sub).mkdir()
    munge_dir = root / "munge"
    munge = pwd.getpwnam(MUNGE_USER)
    os.chown(munge_dir, munge.pw_uid, munge.pw_gid)
    munge_dir.chmod(0o755)  # munged refuses a socket directory others cannot traverse
    for name in layout.nodes:
        devices = root / "dev" / name
        devices.mkdir(parents=True)
        for index in range(layout.gpus_per_node):
            os.mknod(devices / f"nvidia{index}", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    ports = _free_ports(1 + len(layout.nodes))
    host = socket.gethostname().split(".")[0]
    (root / "slurm.conf").write_text(slurm_conf(root, host, ports[0], ports[1:], layout))
    (root / "gres.conf").write_text(gres_conf(root, layout))


def _free_ports(count: int) -> list[int]:
    """Distinct free TCP ports (held open together, so none is handed out twice)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def _start(
    argv: list[str], out: Path, env: Mapping[str, str], logs: list[IO[bytes]], user: str | None = None
) -> subprocess.Popen[bytes]:
    log = open(out, "wb")  # noqa: SIM115 - closed by running_slurm
    logs.append(log)
    as_user: dict[str, Any] = {"user": user, "group": user, "extra_groups": []} if user else {}
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(env),
        start_new_session=True,
        **as_user,
    )


def _all_idle(cluster: SlurmCluster) -> bool:
    try:
        states = parse_node_states(cluster.run("sinfo", "-h", "-N", "-o", "%N %t", timeout=10))
    except (RuntimeError, subprocess.TimeoutExpired):
        return False  # slurmctld not answering yet
    return all(states.get(name) == "idle" for name in cluster.layout.nodes)


def _wait_for(ready: Callable[[], bool], timeout: float, what: str, cluster: SlurmCluster) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        dead = [name for name, p in cluster.processes.items() if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            why = f"{', '.join(dead)} exited" if dead else f"not within {timeout:g} s"
            raise RuntimeError(f"Slurm start-up: waiting for {what}: {why}\n{_log_tails(cluster.root)}")
        time.sleep(0.2)


def _log_tails(root: Path, chars: int = 1500) -> str:
    parts = []
    for path in sorted([*root.glob("*.log"), *root.glob("*.out"), *root.glob("munge/*.log")]):
        with contextlib.suppress(OSError):
            text = path.read_text(errors="replace")[-chars:].strip()
            if text:
                parts.append(f"--- {path.name}\n{text}")
    return "\n".join(parts)


def _teardown(cluster: SlurmCluster) -> None:
    """Best effort, every step: a failure in one must not keep the others from running."""
    slurm = {name: p for name, p in cluster.processes.items() if name != "munged"}
    ctld = cluster.processes.get("slurmctld")
    if ctld is not None and ctld.poll() is None:
        with contextlib.suppress(Exception):
            cluster.cancel_all(timeout=15)  # running steps end with their jobs, before the daemons go
        with contextlib.suppress(Exception):
            cluster.run("scontrol", "shutdown", timeout=10)
    for process in slurm.values():
        _stop(process, wait=10)
    _kill_leftovers(cluster.root)
    munged = cluster.processes.get("munged")
    if munged is not None:
        _stop(munged, wait=5, first=signal.SIGTERM)
    _reap_orphans()


def _stop(process: subprocess.Popen[bytes], wait: float, first: signal.Signals | None = None) -> None:
    """Wait for it to end (after ``first``, if given); SIGTERM, then SIGKILL, if it does not."""
    if process.poll() is not None:
        return
    if first is not None:
        process.send_signal(first)
    for then in (signal.SIGTERM, signal.SIGKILL):
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            process.send_signal(then)
            wait = 5
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


def _kill_leftovers(root: Path) -> int:
    """SIGKILL every process whose environment names this cluster's slurm.conf (job steps and the
    jobs' processes inherit it) or whose command line names its directory."""
    marker = f"SLURM_CONF={root / 'slurm.conf'}".encode()
    needle = str(root).encode()
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            ours = marker in (entry / "environ").read_bytes().split(b"\0") or needle in (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if ours:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed


def _become_subreaper() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _reap_orphans(settle: float = 1.0) -> None:
    """Collect the exit status of dead children this process adopted as a subreaper (zombies only,
    so a live subprocess another part of the program still waits for is left alone)."""
    deadline = time.monotonic() + settle
    while True:
        zombies = _zombie_children()
        for pid in zombies:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        if not zombies or time.monotonic() > deadline:
            return
        time.sleep(0.1)


def _zombie_children() -> list[int]:
    me, found = str(os.getpid()), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = dict(line.split(":\t", 1) for line in (entry / "status").read_text().splitlines() if ":\t" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == me and fields.get("State", "").startswith("Z"):
            found.append(int(entry.name))
    return found


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with running_slurm() as cluster:
        print(f"Slurm up: export SLURM_CONF={cluster.env['SLURM_CONF']}   (Ctrl-C to stop and remove it)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while all(p.poll() is None for p in cluster.processes.values()):
                time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

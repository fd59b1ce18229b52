"""The environment every worker process gets (DESIGN §5).

Pure, so the same function serves the local executor, the Ray executor and tests, and so that
``torch.distributed`` with ``init_method="env://"`` and ``torchrun`` launch lines work unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.domain.arrays import ArrayTask
from gpupool.domain.jobs import JobSpec, Placement

# A service replica's node address, to listen on (with its port in the variable --port-env names):
# what the gateway and the health checks dial.
NODE_ADDRESS_ENV = "GPUPOOL_NODE_ADDRESS"

# What a job gets of the environment of the process that starts it (the head, or a Ray node's
# raylet) -- docs/guide/what-a-job-sees.md. Nothing else passes: not GPUPOOL_TOKEN or GPUPOOL_DATA_DIR,
# not RAY_* (the cluster's auth token), not a cloud key the head's user happened to export. A job
# adds what it needs with --env; gpupool's own variables (below) go on top of both.
#
# HOME, USER and LOGNAME are kept: today every job runs as the head's user, who already has them,
# and tools (pip, torch hub, ~/.cache) need HOME. Once jobs run as their owner these become the
# owner's. CUDA_VISIBLE_DEVICES is always gpupool's own, never the head's: the node writes it from
# the launch request's GPUs (``domain/launch.py``) when it starts the worker.
ALLOWED_ENV = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR"}
    # shared libraries (CUDA, NCCL) outside the loader's default path
    | {"LD_LIBRARY_PATH"}
    # a network interface picked for tensorpipe (torch.distributed.rpc)
    | {"TP_SOCKET_IFNAME"}
)
# Prefixes: locale; CUDA install and behaviour (CUDA_HOME, CUDA_DEVICE_ORDER, ...); NVIDIA container
# runtime; the NCCL and Gloo knobs of distributed training (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, ...).
ALLOWED_ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "NCCL_", "GLOO_")
# Set by gpupool for each worker, whatever the head's environment says.
_NEVER_INHERITED = frozenset({"CUDA_VISIBLE_DEVICES"})


def env_allowed(name: str) -> bool:
    if name in _NEVER_INHERITED:
        return False
    return name in ALLOWED_ENV or name.startswith(ALLOWED_ENV_PREFIXES)


def inherited_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of ``environ`` a job may see: the allow-list, nothing else."""
    return {k: v for k, v in environ.items() if env_allowed(k)}


@dataclass(frozen=True, slots=True)
class Rendezvous:
    master_addr: str
    master_port: int

    @property
    def endpoint(self) -> str:
        """``host:port`` as torchrun's ``--rdzv-endpoint`` takes it (an IPv6 address in brackets)."""
        host = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr
        return f"{host}:{self.master_port}"

    @classmethod
    def parse(cls, endpoint: str) -> Rendezvous:
        """The inverse of ``endpoint``: what the store keeps of an elastic job's attempt."""
        host, _, port = endpoint.rpartition(":")
        return cls(host.removeprefix("[").removesuffix("]"), int(port))


def rdzv_conf(worker: int) -> str:
    """torchrun's ``--rdzv-conf`` for a worker of an elastic job (``PET_RDZV_CONF``: torchrun reads
    each option from ``PET_<OPTION>`` when the command line leaves it out): worker 0's agent hosts
    the c10d store at the endpoint and the others join it, said outright rather than guessed from
    host names (workers on simulated nodes share one). The one place these settings are built.

    The timeouts make a re-form take seconds, not a minute (measured with torch 2.13 on CPU, see
    examples/README.md): a round closes 1 s after its minimum has joined (torch: 30 s), and an
    agent that stopped is taken for gone after 4 missed 1 s heartbeats (torch: 3 of 5 s). Fewer than
    4 took a busy but live agent for dead and split the group in two."""
    return f"is_host={1 if worker == 0 else 0},last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=4"


def elastic_env(job_id: int, attempt: int, spec: JobSpec, rendezvous: Rendezvous, worker: int) -> dict[str, str]:
    """What a worker of an elastic job (issue 35) is told of its rendezvous, so that ``torchrun
    --nnodes=$GPUPOOL_MIN_WORKERS:$GPUPOOL_MAX_WORKERS --rdzv-backend=c10d
    --rdzv-endpoint=$GPUPOOL_RDZV_ENDPOINT --rdzv-id=$GPUPOOL_RDZV_ID`` works unchanged. The
    endpoint is on worker 0, which a shrink never stops, and is the same for every worker of the
    attempt, those added later included; a new attempt is a new rendezvous."""
    return {
        "GPUPOOL_RDZV_ENDPOINT": rendezvous.endpoint,
        "GPUPOOL_RDZV_ID": f"gpupool-{job_id}-{attempt}",
        "GPUPOOL_MIN_WORKERS": str(spec.workers),
        "GPUPOOL_MAX_WORKERS": str(spec.most_workers),
        "NNODES": f"{spec.workers}:{spec.most_workers}",
        "PET_RDZV_CONF": rdzv_conf(worker),
        # Each agent keeps its own store for its workers: with the rendezvous store shared, an agent
        # joining a running group waits for a MASTER_ADDR the old rank 0 never writes (torch 2.x).
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }


def worker_env(
    *,
    job_id: int,
    spec: JobSpec,
    placement: Placement,
    rendezvous: Rendezvous,
    restarts: int,
    preempted: bool,
    checkpoint_dir: str | None = None,
    array: ArrayTask | None = None,
    attempt: int | None = None,
) -> dict[str, str]:
    """``attempt``: the job's attempt the worker belongs to (default: ``restarts + 1``), which
    names an elastic job's rendezvous."""
    env: dict[str, str] = dict(spec.env)
    env.pop("CUDA_VISIBLE_DEVICES", None)  # the node's to write, from the request's ``gpus``: a job's own never wins
    env.update(
        {
            "GPUPOOL_JOB_ID": str(job_id),
            "GPUPOOL_JOB_NAME": spec.name,
            "GPUPOOL_PROJECT": spec.project,
            "GPUPOOL_NODE": placement.node,
            "GPUPOOL_WORKER": str(placement.worker),
            "GPUPOOL_RESTARTS": str(restarts),
            # The node's own indices of the worker's GPUs: the node says them in CUDA_VISIBLE_DEVICES,
            # renumbered from 0 where it walls device files (CUDA then counts only the worker's own).
            "GPUPOOL_GPUS": ",".join(str(i) for i in placement.gpus),
            "MASTER_ADDR": rendezvous.master_addr,
            "MASTER_PORT": str(rendezvous.master_port),
            "WORLD_SIZE": str(spec.workers),
            "RANK": str(placement.worker),
            "LOCAL_RANK": "0",
            # One worker is one torchrun "node": torchrun --nnodes=$NNODES --node_rank=$NODE_RANK
            # --nproc_per_node=$GPUS_PER_NODE works whether workers share a machine or not.
            "NNODES": str(spec.workers),
            "NODE_RANK": str(placement.worker),
            "GPUS_PER_NODE": str(len(placement.gpus)),
        }
    )
    if spec.elastic:
        number = restarts + 1 if attempt is None else attempt
        env.update(elastic_env(job_id, number, spec, rendezvous, placement.worker))
        # Its ranks and world size are the rendezvous's to give at each re-form, not gpupool's: a
        # worker's number may be above the minimum it would have been told as WORLD_SIZE.
        for fixed in ("WORLD_SIZE", "RANK", "NODE_RANK"):
            del env[fixed]
    if placement.gpu_share:
        env["GPUPOOL_GPU_SHARE"] = f"{placement.gpu_share:g}"
        env["GPUPOOL_GPU_MEMORY_MIB"] = str(placement.gpu_memory_mib)
    if placement.cpus:
        # A fraction of a core runs best on one thread; whole cores, one thread per pinned core.
        threads = str(-(-placement.cpu_milli // 1000) if placement.cpu_milli else len(placement.cpus))
        env.update({"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads})
    if preempted:
        env["GPUPOOL_PREEMPTED"] = "1"
    if checkpoint_dir:
        env["GPUPOOL_CHECKPOINT_DIR"] = checkpoint_dir
    if array is not None:
        env.update(array.env())
    return env

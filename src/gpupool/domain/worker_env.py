"""The environment every worker process gets (DESIGN §5).

Pure, so the same function serves the local executor, the Ray executor and tests, and so that
``torch.distributed`` with ``init_method="env://"`` and ``torchrun`` launch lines work unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.jobs import JobSpec, Placement


@dataclass(frozen=True, slots=True)
class Rendezvous:
    master_addr: str
    master_port: int


def worker_env(
    *,
    job_id: int,
    spec: JobSpec,
    placement: Placement,
    rendezvous: Rendezvous,
    restarts: int,
    preempted: bool,
    checkpoint_dir: str | None = None,
) -> dict[str, str]:
    env: dict[str, str] = dict(spec.env)
    env.update(
        {
            "GPUPOOL_JOB_ID": str(job_id),
            "GPUPOOL_JOB_NAME": spec.name,
            "GPUPOOL_PROJECT": spec.project,
            "GPUPOOL_NODE": placement.node,
            "GPUPOOL_WORKER": str(placement.worker),
            "GPUPOOL_RESTARTS": str(restarts),
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in placement.gpus),
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
    if placement.gpu_share:
        env["GPUPOOL_GPU_SHARE"] = f"{placement.gpu_share:g}"
        env["GPUPOOL_GPU_MEMORY_MIB"] = str(placement.gpu_memory_mib)
    if placement.cpus:
        threads = str(len(placement.cpus))
        env.update({"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads})
    if preempted:
        env["GPUPOOL_PREEMPTED"] = "1"
    if checkpoint_dir:
        env["GPUPOOL_CHECKPOINT_DIR"] = checkpoint_dir
    return env

"""Elastic data-parallel training: DDP under torchrun's elastic agent, which keeps training while
workers join and leave, on CPUs (gloo) or GPUs (nccl).

One gpupool worker is one torchrun agent (one torchrun "node") with one training process. gpupool
gives every worker of an elastic job (``--workers MIN:MAX``) the c10d rendezvous to meet at, and
worker 0, which is never removed, hosts its store (``PET_RDZV_CONF=is_host=1``; the others get
``is_host=0``). The launch line, the same on every worker:

    torchrun --nnodes=$GPUPOOL_MIN_WORKERS:$GPUPOOL_MAX_WORKERS --nproc-per-node=1 \\
        --rdzv-backend=c10d --rdzv-endpoint=$GPUPOOL_RDZV_ENDPOINT --rdzv-id=$GPUPOOL_RDZV_ID \\
        --max-restarts=100 examples/elastic_train.py --epochs 20

What happens when the group changes (torch 2.13; examples/README.md, "Elastic training", has the
times measured on a 2-core CPU machine):

- **Grow**: a new agent finds the rendezvous complete and puts itself on its wait list. Every
  running agent polls the store each ``--monitor-interval`` (0.1 s), sees ``num_nodes_waiting > 0``,
  stops its training process and joins a new round with the newcomer. A round closes at once when
  it has MAX nodes, else ``last_call_timeout`` (30 s by default) after it reached MIN. A grow does
  not use up one of ``--max-restarts``.
- **Shrink**: a removed agent gets SIGTERM, stops its process and exits without closing the
  rendezvous (so the job can grow again later). The others' next collective fails, their agents
  count a failure (one of ``--max-restarts``) and re-join. The new round opens only once every node
  of the old one has left it; the removed agent never says so, so the others wait until its
  heartbeat is stale (``keep_alive_interval`` x ``keep_alive_max_attempt``, 5 s x 3 by default),
  then ``last_call_timeout`` again.

Pass ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` in every worker's environment: with torch 2.13's
default (the agents' rendezvous store shared with the training processes) an agent that joins a
running job waits 60 s for a ``MASTER_ADDR`` that rank 0, re-elected, never writes again, and the
whole group fails. And shorten the rendezvous timeouts, in ``PET_RDZV_CONF`` next to ``is_host``
(``--rdzv-conf`` on the command line replaces ``PET_RDZV_CONF``, it does not add to it):
``is_host=1,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=4``.

Every (re)start begins at the last checkpoint: rank 0 writes model, optimizer and epoch to
``$GPUPOOL_CHECKPOINT_DIR`` (else ``--checkpoint-dir``) at the end of every epoch, atomically, as
``elastic-ckpt.pt``; at start rank 0 reads it and broadcasts it to the others, so a re-form loses at
most the epoch in progress. The directory must be one all workers' rank 0 can see (any node may be
rank 0 after a re-form): shared storage across machines.

The global batch is fixed (``--global-batch``) whatever the world size: each step draws the same
samples and the ranks split them, and the loss is scaled so that DDP's average of the ranks'
gradients is the gradient of the whole batch. A step is therefore the same step on 1, 2 or 3
workers and the loss stays comparable across re-forms; more workers only make each step cheaper.

Output (stdout, stable for scripts): ``rank R of W: BACKEND on DEVICE`` on every rank at start,
``resumed from epoch N`` on rank 0 when it loaded a checkpoint, ``epoch E world W loss X`` on rank 0
after each epoch (the mean loss over the epoch's steps), ``final loss X`` on rank 0 at the end.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

CHECKPOINT_FILE = "elastic-ckpt.pt"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world, device = init_distributed(args.device, args.collective_timeout)
    x, y = make_problem(args.seed)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(x.shape[1], 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    ckpt = checkpoint_path(args.checkpoint_dir)
    done = resume(ckpt, model, optimizer, rank, device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    for epoch in range(done + 1, args.epochs + 1):
        total = torch.zeros((), device=device)  # this rank's squared errors over the epoch
        for step in range(args.steps_per_epoch):
            idx = batch_indices(args.seed, epoch, step, len(x), args.global_batch)
            mine = torch.tensor_split(idx, world)[rank]
            xb, yb = x[mine].to(device), y[mine].to(device)
            sse = ((ddp(xb) - yb) ** 2).sum()
            # DDP averages gradients over the ranks; times world over the global batch makes that
            # average the gradient of the whole batch's mean, however it is split.
            loss = sse * world / args.global_batch
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += sse.detach()
            if args.step_time:
                time.sleep(args.step_time / world)  # simulated work: the ranks share the batch
        dist.all_reduce(total)
        if rank == 0:
            if ckpt is not None:
                save_checkpoint(ckpt, epoch, model, optimizer)
            # After the save: a printed epoch is never trained again, whenever the group re-forms.
            mean = float(total) / (args.global_batch * args.steps_per_epoch)
            print(f"epoch {epoch} world {world} loss {mean:.6f}", flush=True)
    if rank == 0:
        with torch.no_grad():
            final = float(nn.functional.mse_loss(model(x.to(device)), y.to(device)))
        print(f"final loss {final:.6f}", flush=True)
    # Leave together: a rank that exits while another is still at work looks like a failure to the
    # agents, which would re-form the group (harmless: it resumes at the last epoch and ends again).
    dist.barrier()
    dist.destroy_process_group()
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=10, help="epochs in all (a resumed run goes on to the same number)")
    p.add_argument("--steps-per-epoch", type=int, default=50, help="optimizer steps per epoch (default 50)")
    p.add_argument("--global-batch", type=int, default=96, help="samples per step, split over the ranks (default 96)")
    p.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate (default 0.01)")
    p.add_argument("--checkpoint-dir", help="where the checkpoint goes when GPUPOOL_CHECKPOINT_DIR is not set")
    p.add_argument(
        "--step-time",
        type=float,
        default=0.0,
        help="seconds of simulated work per step, shared by the ranks: each sleeps step-time / world",
    )
    p.add_argument(
        "--collective-timeout",
        type=float,
        default=120.0,
        help="seconds a collective may wait for a peer that hangs before this process fails (default 120)",
    )
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda when available")
    p.add_argument("--seed", type=int, default=0, help="seed of the data set, the batches and the initial weights")
    args = p.parse_args(argv)
    if min(args.epochs, args.steps_per_epoch, args.global_batch) < 1 or args.collective_timeout <= 0:
        p.error("--epochs, --steps-per-epoch, --global-batch and --collective-timeout must be positive")
    return args


def init_distributed(device: str, timeout_s: float) -> tuple[int, int, torch.device]:
    """Join the group torchrun's agent formed (env://); alone, a world of one on a free local port.

    A failed or hung peer must make this process fail rather than wait forever: the agent only
    re-forms the group once its own process has exited, hence the bounded collective timeout.
    """
    if "WORLD_SIZE" not in os.environ:
        os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"})
        os.environ.setdefault("MASTER_PORT", str(free_port()))
    timeout = timedelta(seconds=timeout_s)
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", init_method="env://", device_id=dev, timeout=timeout)
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo", init_method="env://", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank} of {world}: {dist.get_backend()} on {dev}", flush=True)
    return rank, world, dev


def make_problem(seed: int, n: int = 8192, dim: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed synthetic regression, y = X·w + noise: every rank builds the same one from the seed."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=gen)
    w = torch.randn(dim, 1, generator=gen)
    return x, x @ w + 0.1 * torch.randn(n, 1, generator=gen)


def batch_indices(seed: int, epoch: int, step: int, n: int, size: int) -> torch.Tensor:
    """The global batch of one step, a function of (epoch, step) only, not of the world size."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch * 10_007 + step)
    return torch.randint(0, n, (size,), generator=gen)


def checkpoint_path(flag: str | None) -> Path | None:
    """gpupool's GPUPOOL_CHECKPOINT_DIR wins over the flag, so a job spec can say where state lives."""
    chosen = os.environ.get("GPUPOOL_CHECKPOINT_DIR") or flag
    if not chosen:
        return None
    Path(chosen).mkdir(parents=True, exist_ok=True)
    return Path(chosen) / CHECKPOINT_FILE


def resume(
    ckpt: Path | None, model: nn.Module, optimizer: torch.optim.Optimizer, rank: int, device: torch.device
) -> int:
    """Load the last checkpoint and return its epoch (0: start afresh).

    Rank 0 alone reads it and broadcasts it: after a re-form the others may be new nodes, and all
    ranks must start from the same weights and optimizer state whatever their file systems show.
    """
    box: list[Any] = [None]
    if rank == 0 and ckpt is not None and ckpt.exists():
        box[0] = torch.load(ckpt, map_location="cpu", weights_only=True)
    dist.broadcast_object_list(box, src=0, device=device if device.type == "cuda" else None)
    state = box[0]
    if state is None:
        return 0
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if rank == 0:
        print(f"resumed from epoch {state['epoch']}", flush=True)
    return int(state["epoch"])


def save_checkpoint(ckpt: Path, epoch: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Write to a temporary file in the same directory, fsync, rename, fsync the directory: a reader,
    or a process stopped mid-write by a re-form, only ever sees a whole checkpoint."""
    state = {"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
    fd, tmp = tempfile.mkstemp(dir=ckpt.parent, prefix=".elastic-ckpt-", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp's 0600 would hide it from the job's other users
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, ckpt)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(ckpt.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    sys.exit(main())

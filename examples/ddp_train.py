"""Data-parallel training that runs through gpupool unchanged, on CPUs (gloo) or GPUs (nccl).

Every worker gpupool starts is one rank: it reads the rendezvous gpupool puts in its environment
(MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK) through ``init_method="env://"``. Without
those variables it runs alone as a world of one, so the same file is also a plain script.

    gpupool submit --workers 2 --gpus 0 -- python examples/ddp_train.py --steps 200   # CPUs, gloo
    gpupool submit --workers 2 --gpus 1 -- python examples/ddp_train.py --steps 200   # GPUs, nccl

The problem is a fixed-seed synthetic regression (y = X·w + noise, a small MLP), so the loss falls
within seconds on a CPU and every run of the same command learns the same thing.

Output (stdout, stable for scripts): ``rank R of W: BACKEND on DEVICE`` on every rank at start,
``step N loss X`` on rank 0 every ``--log-every`` steps (the mean over ranks), ``resumed from step
N`` on every rank that resumed, ``final loss X`` on rank 0 (the loss over the whole data set).

Checkpoints: rank 0 writes model, optimizer and step to ``$GPUPOOL_CHECKPOINT_DIR`` (else
``--checkpoint-dir``) every ``--checkpoint-every`` steps and after the last one, atomically, as
``ckpt-000120.pt``, keeping the last two. At start every rank loads the latest and goes on from its
step, so a job that gpupool requeues (``--max-restarts``) or preempts loses at most
``--checkpoint-every`` steps. With several machines the directory must be shared storage.

Fault injection: ``--fail-once-at K`` makes every rank exit with code 3 at step K (after that step's
checkpoint) on the job's first start only (``GPUPOOL_RESTARTS`` 0 or unset), to show a requeued job
resuming.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

FAIL_EXIT_CODE = 3
KEEP_CHECKPOINTS = 2
CHECKPOINT_NAME = re.compile(r"^ckpt-(\d+)\.pt$")


@dataclass(frozen=True)
class Rank:
    """Where this process stands in the job: its rank, the world's size and its device."""

    rank: int
    world: int
    device: torch.device


@dataclass(frozen=True)
class Problem:
    """A fixed synthetic regression data set; every rank builds the same one from the seed."""

    x: torch.Tensor
    y: torch.Tensor
    seed: int

    def batch(self, step: int, rank: Rank, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch of one rank at one step: a function of both, so a resumed run sees what it would have."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step * rank.world + rank.rank)
        idx = torch.randint(0, len(self.x), (size,), generator=gen)
        return self.x[idx].to(rank.device), self.y[idx].to(rank.device)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    me = init_distributed(args.device)
    problem = make_problem(args.seed)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(problem.x.shape[1], 64), nn.ReLU(), nn.Linear(64, 1)).to(me.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    ckpt_dir = checkpoint_dir(args.checkpoint_dir)
    start = resume(ckpt_dir, model, optimizer, me)
    ddp = DistributedDataParallel(model, device_ids=[me.device.index] if me.device.type == "cuda" else None)
    loss_fn = nn.MSELoss()
    for step in range(start + 1, args.steps + 1):
        x, y = problem.batch(step, me, args.batch_size)
        loss = loss_fn(ddp(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step == 1 or due(step, args.log_every, args.steps):
            mean = mean_over_ranks(loss.detach(), me)
            if me.rank == 0:
                print(f"step {step} loss {mean:.6f}", flush=True)
        if ckpt_dir is not None and due(step, args.checkpoint_every, args.steps):
            if me.rank == 0:
                save_checkpoint(ckpt_dir, step, model, optimizer)
            barrier(me)  # no rank moves past a checkpoint that is not on disk yet
        if step == args.fail_once_at:
            fail_on_first_start(step)
        if args.step_time:
            time.sleep(args.step_time)
    final = evaluate(model, problem, me)
    if me.rank == 0:
        print(f"final loss {final:.6f}", flush=True)
    dist.destroy_process_group()
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200, help="optimizer steps in all (default 200)")
    p.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate (default 0.01)")
    p.add_argument("--batch-size", type=int, default=64, help="samples per rank per step (default 64)")
    p.add_argument("--log-every", type=int, default=10, help="print 'step N loss X' every this many steps")
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints; 0: only the last")
    p.add_argument("--checkpoint-dir", help="where checkpoints go when GPUPOOL_CHECKPOINT_DIR is not set")
    p.add_argument("--step-time", type=float, default=0.0, help="seconds to sleep after each step (slow it down)")
    p.add_argument(
        "--fail-once-at",
        type=int,
        default=None,
        metavar="STEP",
        help=f"fault injection: exit {FAIL_EXIT_CODE} at STEP, after its checkpoint, when GPUPOOL_RESTARTS is 0",
    )
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda when available")
    p.add_argument("--seed", type=int, default=0, help="seed of the data set and the initial weights")
    args = p.parse_args(argv)
    if args.steps < 1 or args.log_every < 1 or args.checkpoint_every < 0 or args.batch_size < 1:
        p.error("--steps, --log-every and --batch-size must be positive, --checkpoint-every not negative")
    return args


def init_distributed(device: str) -> Rank:
    """Join the job's process group through env://; alone, a world of one on a free local port.

    nccl needs one GPU per rank: gpupool's CUDA_VISIBLE_DEVICES leaves each worker exactly its own,
    so the rank uses cuda:LOCAL_RANK of those. gloo runs everywhere else.
    """
    if "WORLD_SIZE" not in os.environ:
        os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"})
        os.environ.setdefault("MASTER_PORT", str(free_port()))
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if use_cuda:
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", init_method="env://", device_id=dev)
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo", init_method="env://")
    me = Rank(dist.get_rank(), dist.get_world_size(), dev)
    print(f"rank {me.rank} of {me.world}: {dist.get_backend()} on {dev}", flush=True)
    return me


def make_problem(seed: int, n: int = 8192, dim: int = 32) -> Problem:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=gen)
    w = torch.randn(dim, 1, generator=gen)
    y = x @ w + 0.1 * torch.randn(n, 1, generator=gen)
    return Problem(x, y, seed)


def due(step: int, every: int, last: int) -> bool:
    """Whether a periodic action (a log line, a checkpoint) happens at this step: every N, and the last."""
    return step == last or (every > 0 and step % every == 0)


def checkpoint_dir(flag: str | None) -> Path | None:
    """gpupool's GPUPOOL_CHECKPOINT_DIR wins over the flag, so a job spec can say where state lives."""
    chosen = os.environ.get("GPUPOOL_CHECKPOINT_DIR") or flag
    if not chosen:
        return None
    path = Path(chosen)
    path.mkdir(parents=True, exist_ok=True)
    return path


def resume(ckpt_dir: Path | None, model: nn.Module, optimizer: torch.optim.Optimizer, me: Rank) -> int:
    """Load the latest checkpoint on every rank and return its step (0: start afresh).

    Rank 0 alone picks the step and tells the others, so all ranks resume from the same one even
    when a slow shared file system shows them different listings.
    """
    box = [latest_step(ckpt_dir) if ckpt_dir is not None and me.rank == 0 else 0]
    dist.broadcast_object_list(box, src=0)
    step = int(box[0])
    if step == 0 or ckpt_dir is None:
        return 0
    state = torch.load(ckpt_dir / f"ckpt-{step:06d}.pt", map_location=me.device, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    print(f"resumed from step {step}", flush=True)
    return step


def latest_step(ckpt_dir: Path) -> int:
    steps = [int(m.group(1)) for f in ckpt_dir.iterdir() if (m := CHECKPOINT_NAME.match(f.name))]
    return max(steps, default=0)


def save_checkpoint(ckpt_dir: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Write to a temporary file in the same directory, fsync, rename: a reader (or a process killed
    mid-write) only ever sees whole checkpoints. Then drop all but the newest two."""
    state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
    fd, tmp = tempfile.mkstemp(dir=ckpt_dir, prefix=".ckpt-", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp's 0600 would hide it from the job's other users
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, ckpt_dir / f"ckpt-{step:06d}.pt")
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(ckpt_dir)
    kept = sorted(p for p in ckpt_dir.iterdir() if CHECKPOINT_NAME.match(p.name))
    for stale in kept[:-KEEP_CHECKPOINTS]:
        stale.unlink(missing_ok=True)


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def fsync_dir(path: Path) -> None:
    """Make the rename itself durable, not only the file's bytes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def mean_over_ranks(value: torch.Tensor, me: Rank) -> float:
    total = value.clone()
    dist.all_reduce(total)
    return float(total) / me.world


def barrier(me: Rank) -> None:
    if me.device.type == "cuda":
        dist.barrier(device_ids=[me.device.index])
    else:
        dist.barrier()


def fail_on_first_start(step: int) -> None:
    """The fault --fail-once-at injects: only on a job's first start, so the requeued run goes on."""
    if int(os.environ.get("GPUPOOL_RESTARTS") or 0) > 0:
        return
    print(f"failing on purpose at step {step} (--fail-once-at)", file=sys.stderr, flush=True)
    dist.destroy_process_group()
    sys.exit(FAIL_EXIT_CODE)


@torch.no_grad()
def evaluate(model: nn.Module, problem: Problem, me: Rank) -> float:
    """The loss over the whole data set: the same on every rank, since DDP keeps the weights equal."""
    return float(nn.functional.mse_loss(model(problem.x.to(me.device)), problem.y.to(me.device)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    sys.exit(main())

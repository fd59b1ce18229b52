"""Two-stage pipeline-parallel training through gpupool, on CPUs (gloo) or GPUs (nccl).

The model is cut in two: rank 0 holds stage 0 (the first layer), rank 1 holds stage 1 (the rest
and the loss). Each step splits the batch into micro-batches; rank 0 sends every micro-batch's
activations forward, rank 1 sends the gradients of those activations back (GPipe's fill and
drain), all with explicit ``torch.distributed.send``/``recv``. It needs exactly two workers:

    gpupool submit --workers 2 --gpus 0 -- python examples/pipeline_train.py --steps 200   # CPUs, gloo
    gpupool submit --workers 2 --gpus 1 -- python examples/pipeline_train.py --steps 200   # GPUs, nccl

Same synthetic regression, output lines and options as ``ddp_train.py``: ``rank R of 2: stage R,
BACKEND on DEVICE`` on every rank at start, ``step N loss X`` and ``final loss X`` from the last
stage (rank 1), ``resumed from step N`` on every rank that resumed.

Checkpoints: each rank writes its own stage (model, optimizer, step) to ``$GPUPOOL_CHECKPOINT_DIR``
(else ``--checkpoint-dir``) as ``stage0-ckpt-000120.pt`` / ``stage1-ckpt-000120.pt``, atomically,
keeping its last two; at start both resume from the latest step *both* stages have on disk.

Fault injection: ``--fail-once-at K`` makes both ranks exit with code 3 at step K (after that
step's checkpoint) on the job's first start only (``GPUPOOL_RESTARTS`` 0 or unset).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

FAIL_EXIT_CODE = 3
KEEP_CHECKPOINTS = 2
STAGES = 2
HIDDEN = 64


@dataclass(frozen=True)
class Stage:
    """This rank's part of the model and where it runs."""

    rank: int
    device: torch.device
    module: nn.Module
    optimizer: torch.optim.Optimizer

    @property
    def last(self) -> bool:
        return self.rank == STAGES - 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    world = os.environ.get("WORLD_SIZE", "1")
    if world != str(STAGES):
        print(f"error: pipeline_train.py needs exactly {STAGES} workers (WORLD_SIZE={world})", file=sys.stderr)
        return 2
    device = init_distributed(args.device)
    print(f"rank {dist.get_rank()} of {STAGES}: stage {dist.get_rank()}, {dist.get_backend()} on {device}", flush=True)
    x, y = make_problem(args.seed)
    stage = build_stage(dist.get_rank(), device, x.shape[1], args)
    ckpt_dir = checkpoint_dir(args.checkpoint_dir)
    start = resume(ckpt_dir, stage)
    for step in range(start + 1, args.steps + 1):
        xb, yb = batch(x, y, args.seed, step, args.batch_size)
        loss = train_step(stage, xb, yb, args.micro_batches)
        if stage.last and (step == 1 or due(step, args.log_every, args.steps)):
            print(f"step {step} loss {loss:.6f}", flush=True)
        if ckpt_dir is not None and due(step, args.checkpoint_every, args.steps):
            save_checkpoint(ckpt_dir, step, stage)
            barrier(device)  # neither stage moves past a checkpoint the other has not written
        if step == args.fail_once_at:
            fail_on_first_start(step)
        if args.step_time:
            time.sleep(args.step_time)
    final = pipeline_loss(stage, x, y)
    if stage.last:
        print(f"final loss {final:.6f}", flush=True)
    dist.destroy_process_group()
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200, help="optimizer steps in all (default 200)")
    p.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate (default 0.01)")
    p.add_argument("--batch-size", type=int, default=64, help="samples per step (default 64)")
    p.add_argument("--micro-batches", type=int, default=4, help="micro-batches per step (default 4)")
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
    if args.steps < 1 or args.log_every < 1 or args.checkpoint_every < 0 or args.micro_batches < 1:
        p.error("--steps, --log-every and --micro-batches must be positive, --checkpoint-every not negative")
    if args.batch_size % args.micro_batches:
        p.error("--batch-size must be a multiple of --micro-batches")
    return args


def init_distributed(device: str) -> torch.device:
    """Join the job's process group through env://: nccl on this worker's GPU, else gloo."""
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", init_method="env://", device_id=dev)
        return dev
    dist.init_process_group("gloo", init_method="env://")
    return torch.device("cpu")


def make_problem(seed: int, n: int = 8192, dim: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=gen)
    w = torch.randn(dim, 1, generator=gen)
    return x, x @ w + 0.1 * torch.randn(n, 1, generator=gen)


def batch(x: torch.Tensor, y: torch.Tensor, seed: int, step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A function of the step alone: both stages draw the same samples, so labels never travel."""
    idx = torch.randint(0, len(x), (size,), generator=torch.Generator().manual_seed(seed * 1_000_003 + step))
    return x[idx], y[idx]


def build_stage(rank: int, device: torch.device, dim: int, args: argparse.Namespace) -> Stage:
    """Build the whole model from the seed on every rank and keep this rank's half, so the two
    stages together start exactly as the one model would."""
    torch.manual_seed(args.seed)
    stages = [
        nn.Sequential(nn.Linear(dim, HIDDEN), nn.ReLU()),
        nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1)),
    ]
    module = stages[rank].to(device)
    return Stage(rank, device, module, torch.optim.Adam(module.parameters(), lr=args.lr))


def train_step(stage: Stage, xb: torch.Tensor, yb: torch.Tensor, micro_batches: int) -> float:
    """One GPipe step: every forward, then every backward; returns the batch loss (last stage).

    Rank 0 sends all activations before it waits for any gradient and rank 1 receives all before it
    sends any, so blocking send/recv never wait on each other in a cycle.
    """
    stage.optimizer.zero_grad(set_to_none=True)
    if not stage.last:
        outputs = [stage.module(x.to(stage.device)) for x in xb.chunk(micro_batches)]
        for out in outputs:
            dist.send(out.detach().contiguous(), dst=stage.rank + 1)
        for out in outputs:
            grad = torch.empty_like(out)
            dist.recv(grad, src=stage.rank + 1)
            out.backward(grad)
        stage.optimizer.step()
        return float("nan")
    inputs: list[torch.Tensor] = []
    total = torch.zeros((), device=stage.device)
    for y in yb.chunk(micro_batches):
        act = torch.empty(len(y), HIDDEN, device=stage.device)
        dist.recv(act, src=stage.rank - 1)
        act.requires_grad_(True)
        inputs.append(act)
        total = total + nn.functional.mse_loss(stage.module(act), y.to(stage.device)) / micro_batches
    total.backward()
    for act in inputs:
        assert act.grad is not None
        dist.send(act.grad.contiguous(), dst=stage.rank - 1)
    stage.optimizer.step()
    return float(total.detach())


@torch.no_grad()
def pipeline_loss(stage: Stage, x: torch.Tensor, y: torch.Tensor) -> float:
    """The loss over the whole data set, through both stages (meaningful on the last one)."""
    if not stage.last:
        dist.send(stage.module(x.to(stage.device)).contiguous(), dst=stage.rank + 1)
        return float("nan")
    act = torch.empty(len(x), HIDDEN, device=stage.device)
    dist.recv(act, src=stage.rank - 1)
    return float(nn.functional.mse_loss(stage.module(act), y.to(stage.device)))


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


def resume(ckpt_dir: Path | None, stage: Stage) -> int:
    """Resume both stages from the latest step both have on disk (0: start afresh).

    A stage can be a checkpoint ahead of the other (killed between their writes); each keeps two,
    so the step before is still there for both.
    """
    mine = set(stage_steps(ckpt_dir, stage.rank)) if ckpt_dir is not None else set()
    everyone: list[set[int] | None] = [None] * STAGES
    dist.all_gather_object(everyone, mine)
    step = max(set.intersection(*(s or set() for s in everyone)), default=0)
    if step == 0 or ckpt_dir is None:
        return 0
    state = torch.load(checkpoint_path(ckpt_dir, stage.rank, step), map_location=stage.device, weights_only=True)
    stage.module.load_state_dict(state["model"])
    stage.optimizer.load_state_dict(state["optimizer"])
    print(f"resumed from step {step}", flush=True)
    return step


def checkpoint_path(ckpt_dir: Path, rank: int, step: int) -> Path:
    return ckpt_dir / f"stage{rank}-ckpt-{step:06d}.pt"


def stage_steps(ckpt_dir: Path, rank: int) -> list[int]:
    name = re.compile(rf"^stage{rank}-ckpt-(\d+)\.pt$")
    return sorted(int(m.group(1)) for f in ckpt_dir.iterdir() if (m := name.match(f.name)))


def save_checkpoint(ckpt_dir: Path, step: int, stage: Stage) -> None:
    """Write to a temporary file in the same directory, fsync, rename: a reader (or a process killed
    mid-write) only ever sees whole checkpoints. Then drop all but this stage's newest two."""
    state = {"step": step, "model": stage.module.state_dict(), "optimizer": stage.optimizer.state_dict()}
    fd, tmp = tempfile.mkstemp(dir=ckpt_dir, prefix=f".stage{stage.rank}-", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp's 0600 would hide it from the job's other users
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, checkpoint_path(ckpt_dir, stage.rank, step))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(ckpt_dir)
    for old in stage_steps(ckpt_dir, stage.rank)[:-KEEP_CHECKPOINTS]:
        checkpoint_path(ckpt_dir, stage.rank, old).unlink(missing_ok=True)


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


def barrier(device: torch.device) -> None:
    if device.type == "cuda":
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()


def fail_on_first_start(step: int) -> None:
    """The fault --fail-once-at injects: only on a job's first start, so the requeued run goes on."""
    if int(os.environ.get("GPUPOOL_RESTARTS") or 0) > 0:
        return
    print(f"failing on purpose at step {step} (--fail-once-at)", file=sys.stderr, flush=True)
    dist.destroy_process_group()
    sys.exit(FAIL_EXIT_CODE)


if __name__ == "__main__":
    sys.exit(main())

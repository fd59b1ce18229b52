"""Job arrays: one submission, many tasks that differ only in their index (Slurm's ``--array``).

An array's id is the job id of its first task, as in Slurm, so ``ID`` names the whole array and
``ID_INDEX`` one task of it; each task is an ordinary job in every other respect (its own id,
lifecycle, logs and restarts), which is what lets the scheduler treat a thousand of them as one
shape and every existing command work on a task unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpupool.domain.errors import InvalidInput

# Slurm's default MaxArraySize is 1001; a bigger array is still one request and one transaction.
MAX_ARRAY_TASKS = 10_000
MAX_ARRAY_INDEX = 9_999_999
# Arrays with an unfinished task, per user (gpupool up --max-user-arrays): with MAX_ARRAY_TASKS,
# what bounds the rows one person's sweeps can put in the head's database at once.
DEFAULT_MAX_USER_ARRAYS = 20
_ITEM = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")
_REF = re.compile(r"^(\d+)(?:_(\d+))?$")


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """The indices of an array's tasks (ascending, distinct) and how many may run at once."""

    indices: tuple[int, ...]
    max_running: int | None = None

    @classmethod
    def parse(cls, text: str) -> ArraySpec:
        """``0-999``, ``0-999:4`` (every fourth), ``1,3,10-12``, each with ``%N`` to run at most
        N at once: Slurm's syntax, so an sbatch line's ``--array`` value works here unchanged."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("--array needs indices, e.g. 0-99 or 0-99%10")
        body, sep, cap = text.strip().partition("%")
        max_running = None
        if sep:
            if not cap.isdigit() or not 1 <= int(cap) <= MAX_ARRAY_TASKS:
                raise InvalidInput(
                    f"--array {text!r}: after % comes how many tasks may run at once, 1 to {MAX_ARRAY_TASKS}"
                )
            max_running = int(cap)
        indices: set[int] = set()
        for item in body.split(","):
            match = _ITEM.match(item.strip())
            if match is None:
                raise InvalidInput(f"--array {text!r}: {item!r} is not N, N-M or N-M:STEP (e.g. 0-999:2%10)")
            first = int(match[1])
            last = int(match[2]) if match[2] is not None else first
            step = int(match[3]) if match[3] is not None else 1
            if last < first:
                raise InvalidInput(f"--array {text!r}: {item!r} ends before it starts")
            if step < 1:
                raise InvalidInput(f"--array {text!r}: the step in {item!r} must be at least 1")
            if last > MAX_ARRAY_INDEX:
                raise InvalidInput(f"--array {text!r}: indices go up to {MAX_ARRAY_INDEX}")
            if (last - first) // step + 1 + len(indices) > MAX_ARRAY_TASKS:
                raise InvalidInput(f"--array {text!r}: an array has at most {MAX_ARRAY_TASKS} tasks")
            indices.update(range(first, last + 1, step))
        return cls(tuple(sorted(indices)), max_running)

    def __str__(self) -> str:
        """The canonical form, runs of consecutive indices folded: ``0-9,20%4``."""
        runs: list[str] = []
        start = prev = None
        for i in (*self.indices, None):
            if i is not None and prev is not None and i == prev + 1:
                prev = i
                continue
            if start is not None:
                runs.append(str(start) if start == prev else f"{start}-{prev}")
            start = prev = i
        return ",".join(runs) + (f"%{self.max_running}" if self.max_running else "")

    def folded(self) -> str:
        """The indices (no ``%N``) as runs of a common step, ``0-998:2,1001``: what an array
        accepted as one record keeps of its tasks not written yet, a few characters however many
        (``__str__`` stays as it is: idempotency keys remember requests by it)."""
        first, last, n = self.indices[0], self.indices[-1], len(self.indices)
        step = (last - first) // (n - 1) if n > 2 else 0
        if step and self.indices == tuple(range(first, last + 1, step)):  # the usual case, at C speed
            return f"{first}-{last}" + (f":{step}" if step > 1 else "")
        runs: list[str] = []
        i = 0
        while i < n:
            j = i + 1
            if j < n:
                step = self.indices[j] - self.indices[i]
                while j + 1 < n and self.indices[j + 1] - self.indices[j] == step:
                    j += 1
            if j - i >= 2:  # three or more in step: one run
                first, last = self.indices[i], self.indices[j]
                runs.append(f"{first}-{last}" + (f":{step}" if step > 1 else ""))
                i = j + 1
            else:
                runs.append(str(self.indices[i]))
                i += 1
        return ",".join(runs)


@dataclass(frozen=True, slots=True)
class ArrayTask:
    """Where a job sits in its array: the array's id (its first task's job id) and its index."""

    array_id: int
    index: int
    count: int  # tasks in the array, for GPUPOOL_ARRAY_COUNT

    def env(self) -> dict[str, str]:
        """What the task's workers are told. Slurm's own names (``SLURM_ARRAY_TASK_ID``...) are
        Slurm's to set; docs/guide/arrays.md maps them to these."""
        return {
            "GPUPOOL_ARRAY_ID": str(self.array_id),
            "GPUPOOL_ARRAY_INDEX": str(self.index),
            "GPUPOOL_ARRAY_COUNT": str(self.count),
        }


def parse_job_ref(text: str) -> tuple[int, int | None]:
    """``42`` (a job, or the whole array 42) or ``42_7`` (task 7 of array 42)."""
    match = _REF.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise InvalidInput(f"{text!r} is not a job id: use ID, or ID_INDEX for one task of an array")
    return int(match[1]), (int(match[2]) if match[2] is not None else None)

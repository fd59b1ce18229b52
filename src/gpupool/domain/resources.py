"""Resource quantities: GPU counts (whole or a fraction of one), memory sizes.

Parsing lives here, in the pure core, so the API, the CLI, trace loaders and tests agree on
what ``--gpus 0.5`` or ``--memory 8G`` mean.
"""

from __future__ import annotations

import math
import re

from gpupool.domain.errors import InvalidInput

_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([KMGT])(?:I?B)?|(B))?\s*$", re.IGNORECASE)
_UNIT_MIB = {"": 1.0, "B": 1 / 2**20, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2}

# A fraction is stored with this resolution so that sums of shares never drift past 1.0.
GPU_FRACTION_STEPS = 1000


def parse_memory(value: str | int | None) -> int:
    """Return mebibytes from ``8G``, ``512M``, ``1.5Gi``, ``2048`` (MiB) or an int (MiB)."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise InvalidInput(f"malformed memory size {value!r}: use e.g. 8G, 512M or 2048 (MiB)")
    if isinstance(value, int):
        if value < 0:
            raise InvalidInput(f"memory must not be negative, got {value}")
        return value
    match = _MEMORY_RE.match(value)
    if not match:
        raise InvalidInput(f"malformed memory size {value!r}: use e.g. 8G, 512M or 2048 (MiB)")
    number = float(match.group(1))
    unit = (match.group(2) or match.group(3) or "").upper()
    return math.ceil(number * _UNIT_MIB[unit])


def parse_bytes(value: str) -> int:
    """Bytes from ``1M``, ``512K``, ``4096`` (bytes here, not MiB) or ``1.5G``."""
    match = _MEMORY_RE.match(value)
    if not match:
        raise InvalidInput(f"malformed size {value!r}: use e.g. 1M, 512K or 4096 (bytes)")
    unit = (match.group(2) or match.group(3) or "B").upper()
    return math.ceil(float(match.group(1)) * _UNIT_MIB[unit] * 2**20)


def validate_gpus(value: float) -> float:
    """Check a per-worker GPU request: 0 (CPU only), a fraction of one GPU, or a whole number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise InvalidInput(f"gpus must be a number, got {value!r}")
    if value < 0:
        raise InvalidInput(f"gpus must not be negative, got {value:g}")
    if math.isinf(value):
        raise InvalidInput("gpus must be finite")
    if value > 1 and not float(value).is_integer():
        raise InvalidInput(
            f"gpus {value:g} is neither a whole number nor a fraction of one GPU: "
            "use a whole number (e.g. 2) or a fraction below 1 (e.g. 0.5)"
        )
    if 0 < value < 1 and round(value * GPU_FRACTION_STEPS) == 0:
        raise InvalidInput(f"gpus {value:g} is below the smallest share, 1/{GPU_FRACTION_STEPS} of a GPU")
    return float(value)


def is_fractional(gpus: float) -> bool:
    return 0 < gpus < 1


def fraction_steps(gpus: float) -> int:
    """A fractional GPU share in integer thousandths (exact arithmetic for packing)."""
    return round(gpus * GPU_FRACTION_STEPS)


def format_memory(mib: int) -> str:
    if mib <= 0:
        return "-"
    if mib % 1024 == 0:
        return f"{mib // 1024}G"
    return f"{mib}M"


def format_gpus(gpus: float) -> str:
    return f"{gpus:g}"

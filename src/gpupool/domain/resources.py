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


CPU_MILLI = 1000  # a core in millicores, Kubernetes' unit: CPU requests are counted in these


def parse_cpus(value: object, most: int) -> int:
    """A per-worker CPU request in integer millicores, as Kubernetes counts them: a number of cores
    (``2``, ``0.5``, ``"1.25"``) or millicores (``"500m"``). Counted exactly: ``0.1`` is 100, not
    a float that drifts when a thousand of them are added up. Finer than a millicore is refused,
    as Kubernetes refuses it."""
    try:
        if isinstance(value, bool) or not isinstance(value, int | float | str) or len(str(value)) > 32:
            raise ValueError
        text = str(value).strip()
        if text.isascii() and text.isdigit():  # whole cores, the everyday case: exact without Decimal
            if int(text) > most:
                raise InvalidInput(f"cpus must be at most {most} per worker, got {value!r}")
            return int(text) * CPU_MILLI
        from decimal import Decimal  # ~1 ms of a command's start, for a fraction or millicores

        milli = Decimal(text[:-1]) if text.endswith("m") else Decimal(text) * CPU_MILLI
    except (ValueError, ArithmeticError):
        raise InvalidInput(f"cpus must be a number of cores (2, 0.5) or millicores (500m), got {value!r}") from None
    if not milli.is_finite() or milli < 0:
        raise InvalidInput(f"cpus must be a finite number, 0 or more, got {value!r}")
    if milli > most * CPU_MILLI:
        raise InvalidInput(f"cpus must be at most {most} per worker, got {value!r}")
    if milli != milli.to_integral_value():
        raise InvalidInput(f"cpus {value!r} is finer than a millicore (0.001 of a core): round it")
    return int(milli)


def show_cpus(milli: int) -> str:
    """Millicores as people read them, exactly: ``2``, ``0.5``, ``3.152``."""
    whole, part = divmod(milli, CPU_MILLI)
    return f"{whole}.{part:03d}".rstrip("0") if part else str(whole)


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


def format_bytes(size: int) -> str:
    """1.5G, 200M, 12K, 900B: a size in bytes as notes and events say it (``parse_bytes`` reads it back)."""
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if size >= scale:
            return f"{size / scale:.3g}{unit}"
    return f"{size}B"


def format_gpus(gpus: float) -> str:
    return f"{gpus:g}"

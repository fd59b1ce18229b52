"""A reservation as a value: the GPUs the first job that does not fit will get, and when.

Apart from ``reservation.reserve``, which computes one through a ``Session``, so that the session
can hold a reservation without importing the code that needs the session.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gpupool.domain.jobs import Placement


@dataclass(frozen=True, slots=True)
class Reservation:
    job_id: int
    placements: tuple[Placement, ...]
    until: datetime | None  # when the reserved job is expected to start; None if unknown

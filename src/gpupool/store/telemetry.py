"""GPU telemetry history: raw samples for the recent window, minute aggregates for days.

Downsampling happens when samples are written, so the tables stay bounded without a janitor:
each write rolls every raw sample older than the raw window (cut at a minute boundary) into its
GPU's minute, deletes those samples, and deletes minutes older than the minute window. A minute
that already has an aggregate (a node whose clock lags sent late samples) is merged, not
overwritten. The minute arithmetic runs in Python on the few rows that age out per write, so
SQLite and PostgreSQL behave alike (no ``date_trunc`` or ``strftime``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Select, and_, delete, func, insert, select
from sqlalchemy.orm import Session

from gpupool.domain.nodes import NodeState
from gpupool.domain.records import LIVE_WORKER_STATES
from gpupool.domain.telemetry import GpuKey, GpuSample, Resolution, TelemetryPoint, TelemetryRetention
from gpupool.store.orm import NodeRow, WorkerRow
from gpupool.store.orm_telemetry import GpuMinuteRow, GpuSampleRow

MINUTE = timedelta(minutes=1)


def holders(session: Session) -> dict[GpuKey, int]:
    """The job on each GPU live workers hold. A GPU shared by fractional jobs is filed under the
    oldest of them, so the choice is stable from round to round."""
    rows = session.execute(
        select(WorkerRow.node, WorkerRow.gpus, WorkerRow.job_id).where(WorkerRow.status.in_(LIVE_WORKER_STATES))
    )
    out: dict[GpuKey, int] = {}
    for node, gpus, job_id in rows:
        for gpu in gpus:
            key = (node, int(gpu))
            out[key] = min(out.get(key, job_id), job_id)
    return out


def busy_gpus(session: Session, held: Mapping[GpuKey, int]) -> dict[str, frozenset[int]]:
    """Every node that is not down, with the GPU indices its live workers hold (``held``, from
    ``holders``; maybe none)."""
    nodes = session.scalars(select(NodeRow.name).where(NodeRow.state != NodeState.DOWN.value))
    busy: dict[str, set[int]] = {name: set() for name in nodes}
    for node, gpu in held:
        if node in busy:
            busy[node].add(gpu)
    return {name: frozenset(gpus) for name, gpus in busy.items()}


def write_samples(session: Session, samples: Sequence[GpuSample], now: datetime, retention: TelemetryRetention) -> None:
    """Keep ``samples``, then downsample and prune as of ``now``."""
    if samples:
        session.execute(insert(GpuSampleRow), [_row(s) for s in samples])
    boundary = minute_of(now - timedelta(seconds=retention.raw_s))
    aged = list(session.scalars(select(GpuSampleRow).where(GpuSampleRow.time < boundary)))
    if aged:
        _merge_minutes(session, _aggregate(aged))
        session.execute(delete(GpuSampleRow).where(GpuSampleRow.time < boundary))
    session.execute(delete(GpuMinuteRow).where(GpuMinuteRow.minute < now - timedelta(seconds=retention.minutes_s)))


def history(
    session: Session,
    node: str,
    gpu: int | None,
    since: datetime,
    until: datetime,
    resolution: Resolution = Resolution.AUTO,
) -> tuple[Resolution, list[TelemetryPoint]]:
    """The GPU's (or, with ``gpu`` None, each of the node's GPUs') history, ordered by GPU and time.

    ``AUTO`` answers with raw samples unless part of the window has already been downsampled, and
    then with minutes for all of it (the recent raw samples aggregated on the fly), so one answer
    never mixes resolutions and never has a hole where the raw window ends."""
    if resolution is Resolution.AUTO:
        resolution = Resolution.MINUTE if _downsampled(session, node, gpu, since, until) else Resolution.RAW
    if resolution is Resolution.RAW:
        rows = session.scalars(_raw_query(node, gpu, since, until))
        return resolution, [_raw_point(r) for r in rows]
    start = minute_of(since)
    stored = select(GpuMinuteRow).where(
        GpuMinuteRow.node == node, GpuMinuteRow.minute >= start, GpuMinuteRow.minute <= until
    )
    if gpu is not None:
        stored = stored.where(GpuMinuteRow.gpu == gpu)
    minutes = {(r.gpu, r.minute): _Minute.of_row(r) for r in session.scalars(stored)}
    for key, fresh in _aggregate(session.scalars(_raw_query(node, gpu, start, until))).items():
        _, index, minute = key
        kept = minutes.get((index, minute))
        minutes[(index, minute)] = fresh if kept is None else kept.merged(fresh)
    return resolution, [m.point(node, index, minute) for (index, minute), m in sorted(minutes.items())]


def latest(session: Session, since: datetime | None = None) -> list[GpuSample]:
    """The newest raw sample of every GPU (newer than ``since`` if given), by node and index."""
    newest = select(GpuSampleRow.node, GpuSampleRow.gpu, func.max(GpuSampleRow.time).label("time"))
    if since is not None:
        newest = newest.where(GpuSampleRow.time >= since)
    sub = newest.group_by(GpuSampleRow.node, GpuSampleRow.gpu).subquery()
    rows = session.scalars(
        select(GpuSampleRow)
        .join(
            sub,
            and_(GpuSampleRow.node == sub.c.node, GpuSampleRow.gpu == sub.c.gpu, GpuSampleRow.time == sub.c.time),
        )
        .order_by(GpuSampleRow.node, GpuSampleRow.gpu, GpuSampleRow.id)
    )
    by_gpu = {(r.node, r.gpu): _sample(r) for r in rows}  # the last written wins a tie in time
    return list(by_gpu.values())


def minute_of(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(second=0, microsecond=0)


@dataclass(slots=True)
class _Minute:
    """Running sums of one GPU's minute; ``merged`` combines two parts of the same minute."""

    samples: int = 0
    memory_sum: float = 0.0
    memory_total_mib: int = 0
    util_sum: float = 0.0
    util_n: int = 0
    util_max: float | None = None
    temperature_max: float | None = None
    power_sum: float = 0.0
    power_n: int = 0
    energy: float | None = None  # a counter that only grows: the last value is the largest
    power_limit: float | None = None  # the lowest limit in force during the minute

    def add(self, r: GpuSampleRow) -> None:
        self.samples += 1
        self.memory_sum += r.memory_used_mib
        self.memory_total_mib = r.memory_total_mib
        if r.utilization_pct is not None:
            self.util_sum += r.utilization_pct
            self.util_n += 1
            self.util_max = _max(self.util_max, r.utilization_pct)
        self.temperature_max = _max(self.temperature_max, r.temperature_c)
        if r.power_w is not None:
            self.power_sum += r.power_w
            self.power_n += 1
        self.energy = _max(self.energy, r.energy_j)
        self.power_limit = _min(self.power_limit, r.power_limit_w)

    def merged(self, other: _Minute) -> _Minute:
        return _Minute(
            samples=self.samples + other.samples,
            memory_sum=self.memory_sum + other.memory_sum,
            memory_total_mib=other.memory_total_mib or self.memory_total_mib,
            util_sum=self.util_sum + other.util_sum,
            util_n=self.util_n + other.util_n,
            util_max=_max(self.util_max, other.util_max),
            temperature_max=_max(self.temperature_max, other.temperature_max),
            power_sum=self.power_sum + other.power_sum,
            power_n=self.power_n + other.power_n,
            energy=_max(self.energy, other.energy),
            power_limit=_min(self.power_limit, other.power_limit),
        )

    @classmethod
    def of_row(cls, r: GpuMinuteRow) -> _Minute:
        return cls(
            samples=r.samples,
            memory_sum=r.memory_used_mib * r.samples,
            memory_total_mib=r.memory_total_mib,
            util_sum=(r.utilization_pct or 0.0) * r.utilization_samples,
            util_n=r.utilization_samples,
            util_max=r.utilization_max_pct,
            temperature_max=r.temperature_c,
            power_sum=(r.power_w or 0.0) * r.power_samples,
            power_n=r.power_samples,
            energy=r.energy_j,
            power_limit=r.power_limit_w,
        )

    def fill(self, r: GpuMinuteRow) -> None:
        r.samples, r.memory_used_mib, r.memory_total_mib = self.samples, self.memory_avg, self.memory_total_mib
        r.utilization_pct, r.utilization_max_pct, r.utilization_samples = self.util_avg, self.util_max, self.util_n
        r.temperature_c, r.power_w, r.power_samples, r.energy_j = (
            self.temperature_max,
            self.power_avg,
            self.power_n,
            self.energy,
        )
        r.power_limit_w = self.power_limit

    @property
    def memory_avg(self) -> float:
        return self.memory_sum / self.samples if self.samples else 0.0

    @property
    def util_avg(self) -> float | None:
        return self.util_sum / self.util_n if self.util_n else None

    @property
    def power_avg(self) -> float | None:
        return self.power_sum / self.power_n if self.power_n else None

    def point(self, node: str, index: int, minute: datetime) -> TelemetryPoint:
        return TelemetryPoint(
            node=node,
            index=index,
            time=minute,
            resolution=Resolution.MINUTE,
            samples=self.samples,
            memory_used_mib=self.memory_avg,
            memory_total_mib=self.memory_total_mib,
            utilization_pct=self.util_avg,
            utilization_max_pct=self.util_max,
            temperature_c=self.temperature_max,
            power_w=self.power_avg,
            energy_j=self.energy,
            power_limit_w=self.power_limit,
        )


def _aggregate(rows: Iterable[GpuSampleRow]) -> dict[tuple[str, int, datetime], _Minute]:
    minutes: dict[tuple[str, int, datetime], _Minute] = {}
    for r in rows:
        minutes.setdefault((r.node, r.gpu, minute_of(r.time)), _Minute()).add(r)
    return minutes


def _merge_minutes(session: Session, minutes: dict[tuple[str, int, datetime], _Minute]) -> None:
    """Write aggregates, merged into the minutes already stored (late samples)."""
    first, last = min(k[2] for k in minutes), max(k[2] for k in minutes)
    stored = session.scalars(select(GpuMinuteRow).where(GpuMinuteRow.minute >= first, GpuMinuteRow.minute <= last))
    existing = {(r.node, r.gpu, r.minute): r for r in stored}
    for (node, index, minute), fresh in minutes.items():
        row = existing.get((node, index, minute))
        if row is None:
            row = GpuMinuteRow(node=node, gpu=index, minute=minute)
            session.add(row)
        else:
            fresh = _Minute.of_row(row).merged(fresh)
        fresh.fill(row)
    session.flush()


def _downsampled(session: Session, node: str, gpu: int | None, since: datetime, until: datetime) -> bool:
    query = select(GpuMinuteRow.minute).where(
        GpuMinuteRow.node == node, GpuMinuteRow.minute > since - MINUTE, GpuMinuteRow.minute <= until
    )
    if gpu is not None:
        query = query.where(GpuMinuteRow.gpu == gpu)
    return session.scalars(query.limit(1)).first() is not None


def _raw_query(node: str, gpu: int | None, since: datetime, until: datetime) -> Select[GpuSampleRow]:
    query = select(GpuSampleRow).where(
        GpuSampleRow.node == node, GpuSampleRow.time >= since, GpuSampleRow.time <= until
    )
    if gpu is not None:
        query = query.where(GpuSampleRow.gpu == gpu)
    return query.order_by(GpuSampleRow.gpu, GpuSampleRow.time, GpuSampleRow.id)


def _max(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def _min(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def _row(s: GpuSample) -> dict[str, object]:
    return {
        "node": s.node,
        "gpu": s.index,
        "uuid": s.uuid,
        "time": s.time,
        "memory_used_mib": s.memory_used_mib,
        "memory_total_mib": s.memory_total_mib,
        "simulated": s.simulated,
        "utilization_pct": s.utilization_pct,
        "temperature_c": s.temperature_c,
        "power_w": s.power_w,
        "energy_j": s.energy_j,
        "ecc_errors": s.ecc_errors,
        "xid_errors": s.xid_errors,
        "last_xid": s.last_xid,
        "power_limit_w": s.power_limit_w,
    }


def _sample(r: GpuSampleRow) -> GpuSample:
    return GpuSample(
        node=r.node,
        index=r.gpu,
        uuid=r.uuid,
        time=r.time,
        memory_used_mib=r.memory_used_mib,
        memory_total_mib=r.memory_total_mib,
        simulated=r.simulated,
        utilization_pct=r.utilization_pct,
        temperature_c=r.temperature_c,
        power_w=r.power_w,
        energy_j=r.energy_j,
        ecc_errors=r.ecc_errors,
        xid_errors=r.xid_errors,
        last_xid=r.last_xid,
        power_limit_w=r.power_limit_w,
    )


def _raw_point(r: GpuSampleRow) -> TelemetryPoint:
    return TelemetryPoint(
        node=r.node,
        index=r.gpu,
        time=r.time,
        resolution=Resolution.RAW,
        samples=1,
        memory_used_mib=float(r.memory_used_mib),
        memory_total_mib=r.memory_total_mib,
        utilization_pct=r.utilization_pct,
        utilization_max_pct=r.utilization_pct,
        temperature_c=r.temperature_c,
        power_w=r.power_w,
        energy_j=r.energy_j,
        ecc_errors=r.ecc_errors,
        xid_errors=r.xid_errors,
        power_limit_w=r.power_limit_w,
    )

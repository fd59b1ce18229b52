"""Per-job GPU power on a node (issue 33): what gpupool set on each GPU, and for which workers,
kept in a record per GPU so that every GPU gets its default back however its workers end.

A worker is entered on each of its GPUs before it starts, with the setting its job resolved to
(``LaunchRequest.gpu_power``; None: max). A GPU runs at ``domain.power.shared_setting`` of its live
workers' settings (the highest; any at max keeps the default), or at the head's throttle while one
is set (``throttle``, for the power budget). When a worker ends (``poll`` sees its exit or its lost
supervisor, its job is forgotten, the node is cleaned) its entry goes and the GPU returns to what
its remaining workers allow: its default when none is left.

The record (``power/gpu-N.json`` in the node's data dir, 0600) outlives the runtime: a runtime
started over records a dead one left (a restarted head, a node that rebooted or whose agent died)
drops the workers that are gone, restores the GPUs none is left on and sets again what the others
allow. A worker counts as gone once its exit is recorded or its supervisor is no longer running, as
``poll`` sees it lost.

NVML's refusal (not root, a GPU that does not allow it) leaves the GPU as it was and the worker's
note says so, with NVML's words: what the record says was set, was set.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupool.clock import Clock
from gpupool.domain.launch import PowerSetting
from gpupool.domain.nodes import GpuInfo
from gpupool.domain.power import shared_setting
from gpupool.node import private, rundir
from gpupool.node.gpu.probe import GpuProbe, PowerRefused
from gpupool.node.power_calibrate import calibrate

log = logging.getLogger("gpupool.power")
RECORDS = "power"  # in the node's data dir
STARTING_S = 60.0  # a worker whose supervisor has not written its pid yet counts as alive this long


@dataclass
class GpuRecord:
    """One GPU: what gpupool set on it (None: nothing, it is at its default), the head's throttle,
    and each live worker's run directory with what its job asked for."""

    index: int
    applied: PowerSetting | None = None
    throttle: PowerSetting | None = None
    workers: dict[str, PowerSetting | None] = field(default_factory=dict)

    def target(self) -> PowerSetting | None:
        """What the GPU should run at now: its default once no worker is left on it."""
        if not self.workers:
            return None
        return self.throttle if self.throttle is not None else shared_setting(list(self.workers.values()))

    def to_json(self) -> str:
        def one(s: PowerSetting | None) -> dict[str, Any] | None:
            return None if s is None else s.to_json()

        workers = {run: one(s) for run, s in sorted(self.workers.items())}
        return json.dumps(
            {"gpu": self.index, "applied": one(self.applied), "throttle": one(self.throttle), "workers": workers}
        )

    @classmethod
    def from_json(cls, text: str) -> GpuRecord:
        data = json.loads(text)
        workers = {str(run): PowerSetting.from_json(s) for run, s in (data.get("workers") or {}).items()}
        return cls(
            int(data["gpu"]),
            PowerSetting.from_json(data.get("applied")),
            PowerSetting.from_json(data.get("throttle")),
            workers,
        )


def worker_alive(run_dir: Path) -> bool:
    """Whether the worker of ``run_dir`` may still run: no exit recorded and its supervisor alive
    (or, without a pid yet, a launch of the last minute still starting)."""
    if not run_dir.is_dir() or rundir.read_exit(run_dir) is not None:
        return False
    pid = rundir.read_pid(run_dir)
    if pid is None:
        try:
            return time.time() - (run_dir / rundir.SPEC).stat().st_mtime < STARTING_S
        except OSError:
            return False
    return rundir.supervisor_running(pid, run_dir)


class NodePower:
    def __init__(self, name: str, probe: GpuProbe, data_dir: Path, gpus: Callable[[], Sequence[GpuInfo]]) -> None:
        self._name = name
        self._probe = probe
        self._data_dir = data_dir
        self._dir = data_dir / RECORDS
        self._gpus = gpus
        self._lock = threading.Lock()

    def calibrate(self, bound_s: float, busy: Collection[int], clock: Clock) -> list[dict[str, Any]]:
        """Each GPU model's curve, measured here (``node/power_calibrate.py``)."""
        return calibrate(self._probe, self._name, frozenset(busy), bound_s, clock)

    def started(self, run_dir: str, gpus: Sequence[int], setting: PowerSetting | None) -> str | None:
        """Enter a worker on its GPUs before it starts and set what each GPU now runs at; the
        sentence for its job's events (None: nothing to say, its GPUs at their default)."""
        notes = []
        with self._lock:
            for index in gpus:
                record = self._load(index) or GpuRecord(index)
                self._prune(record)
                before = record.applied
                record.workers[run_dir] = setting
                target = record.target()
                refused = self._set(record, target) if target != record.applied else None
                self._save(record)
                note = self._started_note(index, setting, target, before, refused, record.applied)
                if note:
                    notes.append(note)
        return "; ".join(notes) or None

    def ended(self, run_dir: str | None = None) -> None:
        """A worker ended (None: any may have, e.g. its job was forgotten): drop it and every worker
        that is gone, and give each GPU what its remaining workers allow."""
        with self._lock:
            for record in self._records():
                if self._prune(record, run_dir):
                    self._settle(record, again=False)

    def recover(self) -> None:
        """At the runtime's start, over records a dead runtime left: drop the workers that are gone,
        restore the GPUs none is left on, and set again what the others allow (a simulated GPU,
        or one that was reset meanwhile, no longer has it)."""
        with self._lock:
            for record in self._records():
                self._prune(record)
                self._settle(record, again=True)

    def throttle(self, gpus: Sequence[int], setting: PowerSetting | None) -> list[str]:
        """The head lowers (``setting``) or gives back (None) the GPUs of running jobs: the power
        budget's throttle. A GPU no worker runs on is left at its default."""
        said = []
        with self._lock:
            for index in gpus:
                record = self._load(index) or GpuRecord(index)
                self._prune(record)
                if not record.workers:
                    said.append(f"{self._gpu(index)}: no job runs on it; left at {self._at(index, record.applied)}")
                    continue
                record.throttle = setting
                target = record.target()
                refused = self._set(record, target) if target != record.applied else None
                self._save(record)
                if refused:
                    said.append(f"{self._gpu(index)}: {self._refusal(index, target, refused, record.applied)}")
                else:
                    said.append(f"{self._gpu(index)}: at {self._at(index, target)}")
        return said

    def _settle(self, record: GpuRecord, *, again: bool) -> None:
        target = record.target()
        if target != record.applied or (again and target is not None):
            refused = self._set(record, target)
            if refused:
                log.warning(
                    "%s: %s", self._gpu(record.index), self._refusal(record.index, target, refused, record.applied)
                )
        self._save(record)

    def _set(self, record: GpuRecord, target: PowerSetting | None) -> str | None:
        """Apply ``target``; NVML's words where it refused (the record keeps what the GPU has)."""
        try:
            self._probe.apply_power(record.index, target)
        except PowerRefused as exc:
            return exc.message
        record.applied = target
        return None

    def _prune(self, record: GpuRecord, ended: str | None = None) -> bool:
        """Drop ``ended`` and every worker that is gone; whether the record changed."""
        gone = [run for run in record.workers if run == ended or not worker_alive(Path(run))]
        for run in gone:
            del record.workers[run]
        if not record.workers:
            record.throttle = None
        return bool(gone)

    def _started_note(
        self,
        index: int,
        asked: PowerSetting | None,
        target: PowerSetting | None,
        before: PowerSetting | None,
        refused: str | None,
        now: PowerSetting | None,
    ) -> str | None:
        gpu = self._gpu(index)
        if refused:
            return f"{gpu}: {self._refusal(index, target, refused, now)}"
        if asked is not None and target == asked:
            return f"{gpu}: {_done(asked)}"
        if asked is not None:
            shared = f"shared, so it runs at {self._at(index, target)}, the most its jobs allow"
            return f"{gpu}: {shared} (this job asked for {_article(asked)})"
        if before is not None and target is None:
            return f"{gpu}: back to {self._at(index, None)}, as this job at max shares it"
        return None

    def _refusal(self, index: int, target: PowerSetting | None, refused: str, now: PowerSetting | None) -> str:
        what = "restore its default" if target is None else f"set {_article(target)}"
        return f"could not {what} ({refused}); it runs at {self._at(index, now)}"

    def _at(self, index: int, setting: PowerSetting | None) -> str:
        if setting is not None:
            return _article(setting)
        default = next((g.power_default_w for g in self._gpus() if g.index == index), None)
        return f"its default {default} W" if default else "its default limit"

    def _gpu(self, index: int) -> str:
        return f"GPU {index} of {self._name}"

    def _path(self, index: int) -> Path:
        return self._dir / f"gpu-{index}.json"

    def _load(self, index: int) -> GpuRecord | None:
        try:
            return GpuRecord.from_json(self._path(index).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring the unreadable power record of GPU %d: %s", index, exc)
            return None

    def _records(self) -> list[GpuRecord]:
        if not self._dir.is_dir():
            return []
        found = []
        for path in sorted(self._dir.glob("gpu-*.json")):
            index = path.stem.removeprefix("gpu-")
            if index.isdigit() and (record := self._load(int(index))) is not None:
                found.append(record)
        return found

    def _save(self, record: GpuRecord) -> None:
        """Written before the worker starts; gone once the GPU is at its default with no worker."""
        path = self._path(record.index)
        if not record.workers and record.applied is None:
            path.unlink(missing_ok=True)
            return
        private.private_dir(self._dir, below=self._data_dir)
        private.write_private(path, record.to_json())


def _article(setting: PowerSetting) -> str:
    return f"a {setting.text}" if setting.kind == "limit" else setting.text


def _done(setting: PowerSetting) -> str:
    return f"{setting.text} set" if setting.kind == "limit" else setting.text

"""The run-directory protocol between the node runtime and a worker's supervisor: the spec and
the exit record survive JSON, the one lease rule, and a supervisor that needs only the standard
library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpupool.node import rundir
from gpupool.node.rundir import ChildRecord, ExitRecord, Lease, RunSpec

SPEC = RunSpec(
    argv=("python", "-c", "print(1)"),
    env={"CUDA_VISIBLE_DEVICES": "0,1", "PATH": "/usr/bin"},
    log="/data/logs/job-1/worker-0.log",
    header="--- job 1 ---",
    cwd="/work",
    cpus=(0, 2),
    memory_mib=1024,
    grace_s=2.5,
    lease=Lease("/data/lease", 5.0),
)


@pytest.mark.parametrize(
    "spec",
    [SPEC, RunSpec(argv=("true",), env={}, log="/l", header="h", cpus=(0, 1, 2), cpu_milli=500)],
)
def test_the_spec_round_trips_through_json(spec: RunSpec) -> None:
    assert RunSpec.from_json(spec.to_json()) == spec


def test_the_spec_keeps_its_wire_format() -> None:
    assert json.loads(SPEC.to_json()) == {
        "argv": ["python", "-c", "print(1)"],
        "env": {"CUDA_VISIBLE_DEVICES": "0,1", "PATH": "/usr/bin"},
        "cwd": "/work",
        "log": "/data/logs/job-1/worker-0.log",
        "cpus": [0, 2],
        "memory_mib": 1024,
        "grace_s": 2.5,
        "header": "--- job 1 ---",
        "lease": "/data/lease",
        "lease_timeout_s": 5.0,
    }
    assert "lease" not in json.loads(RunSpec(argv=("true",), env={}, log="/l", header="h").to_json())


def test_a_sparse_spec_gets_the_defaults() -> None:
    spec = RunSpec.from_json(json.dumps({"argv": ["true"], "env": {}, "log": "/l", "header": "h", "lease": "/x"}))
    assert (spec.cwd, spec.cpus, spec.memory_mib, spec.grace_s) == (None, (), 0, 10.0)
    assert spec.lease == Lease("/x", 10.0)


@pytest.mark.parametrize(
    ("record", "lost"),
    [
        (ExitRecord(0, finished_at="2025-01-01T00:00:00+00:00"), False),
        (ExitRecord(137), False),
        (ExitRecord(143, fenced=True), True),  # self-fenced: lost whatever the code
        (ExitRecord(None, fenced=True, note="stopped when the node came back"), True),
        (ExitRecord(None), True),
    ],
)
def test_exit_records_round_trip_and_say_when_a_worker_is_lost(record: ExitRecord, lost: bool) -> None:
    assert ExitRecord.from_json(record.to_json()) == record
    assert record.lost is lost


def test_records_in_a_run_dir(tmp_path: Path) -> None:
    assert rundir.read_exit(tmp_path) is None and rundir.read_child(tmp_path) is None
    assert rundir.read_pid(tmp_path) is None
    rundir.write_exit(tmp_path, ExitRecord(3))
    rundir.write_child(tmp_path, ChildRecord(pid=10, pgid=10))
    rundir.write_pid(tmp_path, 9)
    assert rundir.read_exit(tmp_path) == ExitRecord(3)
    assert rundir.read_child(tmp_path) == ChildRecord(10, 10)
    assert rundir.read_pid(tmp_path) == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([rundir.EXIT, rundir.CHILD, rundir.SUPERVISOR_PID])
    (tmp_path / rundir.EXIT).write_text("{half")
    assert rundir.read_exit(tmp_path) is None  # unreadable counts as not yet recorded


RENEWED = 1_700_000_000.0


@pytest.mark.parametrize(
    ("age_s", "timeout_s", "expired"),
    [
        (0.0, 5.0, False),
        (4.5, 5.0, False),
        (5.0, 5.0, False),  # at the timeout: still fresh
        (5.5, 5.0, True),
        (60.0, 0.5, True),
        (-1.0, 5.0, False),  # renewed "in the future" (clock step): fresh
        (None, 5.0, True),  # never written
    ],
)
def test_the_lease_rule(tmp_path: Path, age_s: float | None, timeout_s: float, expired: bool) -> None:
    lease = tmp_path / rundir.LEASE
    if age_s is not None:
        lease.touch()
        os.utime(lease, (RENEWED, RENEWED))
    now = RENEWED + (age_s or 0.0)
    assert rundir.lease_age(lease, now) == (float("inf") if age_s is None else age_s)
    assert rundir.lease_expired(lease, timeout_s, now) is expired


def test_the_supervisor_imports_only_the_standard_library() -> None:
    """It starts on every launch, with whatever Python the node has: gpupool's own stdlib-only
    modules, nothing installed beside them."""
    code = (
        "import sys; before = set(sys.modules); import gpupool.node.supervisor; "
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] not in sys.stdlib_module_names))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # The image cache (image_start, images, oci, unpack) only for a worker with an image: imported then.
    own = ["accounts", "bpf", "cgfiles", "cgroups", "container", "devices", "image_job", "jobns", "rundir"]
    own += ["supervisor"]
    domain = ["gpupool.domain", "gpupool.domain.launch"]  # the usage reading cgroups.py builds, stdlib-only
    assert out.strip() == str(["gpupool", *domain, "gpupool.node", *(f"gpupool.node.{m}" for m in own)])

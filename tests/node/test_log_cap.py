"""A worker's log past --max-log-size keeps its newest half behind a note, and the worker, which
writes with O_APPEND, goes on writing at the new end."""

from __future__ import annotations

import os
from pathlib import Path

from gpupool.domain.launch import WorkerHandle
from gpupool.node import rundir
from gpupool.node.log_cap import LogCap, cap


def test_a_log_past_its_cap_keeps_its_newest_half_and_says_so(tmp_path: Path) -> None:
    log = tmp_path / "worker-0.log"
    writer = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # as the worker holds it
    os.write(writer, b"".join(b"line%05d\n" % i for i in range(300)))  # 3,000 bytes
    assert cap(log, 4000) == 0 and log.stat().st_size == 3000  # under the cap: untouched
    assert cap(log, 1000) == 2500
    text = log.read_text()
    first, rest = text.split("\n", 1)
    assert first == "gpupool: this log passed --max-log-size (1000 bytes): at least its first 2500 bytes were cut"
    assert rest == "".join(f"line{i:05d}\n" for i in range(250, 300))
    os.write(writer, b"after\n")
    assert log.read_text().endswith("line00299\nafter\n")  # appended at the new end, no hole
    os.close(writer)


def test_the_runtime_s_check_finds_the_log_through_the_spec_and_waits_between_checks(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    log = tmp_path / "w.log"
    log.write_bytes(b"x" * 5000)
    (run / rundir.SPEC).write_text(rundir.RunSpec(argv=("x",), env={}, log=str(log), header="").to_json())
    now = [0.0]
    watch = LogCap(2000, every_s=1.0, clock=lambda: now[0])
    assert watch.check(WorkerHandle(1, str(run))) == 4000 and log.stat().st_size < 2000
    log.write_bytes(b"y" * 5000)
    assert watch.check(WorkerHandle(1, str(run))) == 0  # checked a moment ago
    now[0] += 1
    assert watch.check(WorkerHandle(1, str(run))) == 4000
    assert LogCap(0).check(WorkerHandle(1, str(run))) == 0  # 0: no cap

"""Worker cgroups on real processes (issue 14 part 3): the memory limit kills with a visible OOM
and spares the neighbour, a cpuset cannot be widened, a pids limit stops a fork loop, another
GPU's device file is refused, and a kill leaves nothing behind, setsid and double forks included.

Needs root and a cgroup file system; each test skips saying why when the machine lacks what it
checks. The groups live under a parent named for this test process and are swept even on failure.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gpupool.node.cgroups import NAME_RE, CgroupError, Layout, Limits, WorkerGroup, detect

PY = sys.executable


def _skip_unless_cgroups() -> None:
    if os.geteuid() != 0:
        pytest.skip("cgroup tests need root")
    if not os.path.isdir("/sys/fs/cgroup") or not os.listdir("/sys/fs/cgroup"):
        pytest.skip("no cgroup file system at /sys/fs/cgroup")


def sweep(layout: Layout, node: str, timeout: float = 5.0) -> list[str]:
    """Kill and remove every worker group of ``node`` this module left, then the node's own groups."""
    names: set[str] = set()
    for mount in layout.mounts():
        with contextlib.suppress(OSError):
            names.update(e.name for e in os.scandir(os.path.join(mount, layout.parent, node)) if e.is_dir())
    groups = [WorkerGroup(layout, node, n) for n in sorted(names) if NAME_RE.fullmatch(n)]
    for g in groups:
        g.kill()
    for g in groups:
        g.wait_empty(timeout)
        g.remove()
    for mount in layout.mounts():
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(mount, layout.parent, node))
    return [g.rel.rsplit("/", 1)[1] for g in groups]


def _layout(unified: bool) -> Iterator[Layout]:
    _skip_unless_cgroups()
    layout = detect(parent=f"gpupool-test-{os.getpid()}", unified=unified)
    if not layout.mounts():
        pytest.skip(f"no cgroup hierarchy could be used: {layout.notes}")
    try:
        yield layout
    finally:
        sweep(layout, node(layout))
        for mount in layout.mounts():
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(mount, layout.parent))


@pytest.fixture(scope="module")
def layout() -> Iterator[Layout]:
    yield from _layout(unified=True)


@pytest.fixture(scope="module")
def v1_layout() -> Iterator[Layout]:
    yield from _layout(unified=False)


def need(layout: Layout, what: str) -> None:
    if layout.mechanism(what) == "none":
        pytest.skip(f"this machine does not enforce {what}: {layout.notes}")


def node(layout: Layout) -> str:
    """The two fixtures' layouts share the parent group; each sweeps its own node."""
    return "n1" if layout.unified else "n1-v1"


def group(layout: Layout, name: str, limits: Limits | None = None) -> WorkerGroup:
    g = WorkerGroup(layout, node(layout), name)
    g.create(limits or Limits())
    return g


def start(g: WorkerGroup, code: str, **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen([PY, "-c", code], preexec_fn=g.add_self, text=True, **kw)  # type: ignore[call-overload, no-any-return]


def live(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running; a zombie (left for a reaper that may be slow) holds nothing."""
    out = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                out.add(pid)
    return out


def test_detect_reports_the_hybrid_layout_of_this_machine(layout: Layout) -> None:
    found = (layout.unified, sorted(layout.v2), sorted(layout.v1))
    if found != ("/sys/fs/cgroup/unified", [], ["cpu", "cpuset", "devices", "memory", "pids"]):
        pytest.skip(f"not the hybrid layout this project is built on: unified, v2, v1 = {found}")
    assert layout.isolation() == {
        "memory": "cgroup v1 memory+swap",
        "cpus": "cgroup v1 cpuset",
        "cpu quota": "cgroup v1 cpu",
        "devices": "cgroup v1 devices + cgroup v2 device program (BPF)",
        "kill": "cgroup v2 cgroup.kill",
    }
    assert layout.device_program
    assert layout.mechanism("pids") == "cgroup v1 pids"
    assert layout.mounts() == [f"/sys/fs/cgroup/{h}" for h in ("unified", "cpu", "cpuset", "devices", "memory", "pids")]
    assert layout.notes == ()


def test_detect_says_what_it_cannot_use(tmp_path: Path) -> None:
    """A hierarchy where the parent group cannot be made is left out and noted, not pretended."""
    info = tmp_path / "mountinfo"
    missing = tmp_path / "cg" / "memory"  # mounted, says mountinfo, but not there: mkdir fails
    info.write_text(f"35 31 0:32 / {missing} rw,relatime - cgroup cgroup rw,memory\n")
    layout = detect(str(tmp_path / "cg"), "gp", mountinfo=str(info))
    assert layout.isolation() == {
        "memory": "none",
        "cpus": "none",
        "cpu quota": "none",
        "devices": "none",
        "kill": "none",
    }
    assert any(str(missing / "gp") in n for n in layout.notes)


def test_the_memory_limit_kills_and_says_oom_while_the_neighbour_runs(layout: Layout) -> None:
    need(layout, "memory")
    hog = group(layout, "oom-hog", Limits(memory_mib=64))
    calm = group(layout, "oom-calm", Limits(memory_mib=64))
    neighbour = start(calm, "import time; time.sleep(30)")
    started = time.monotonic()
    eater = start(hog, "x = [b'x' * 2**20 for _ in range(256)]; print('survived')", stdout=subprocess.PIPE)
    out, _ = eater.communicate(timeout=20)
    print(f"OOM kill after {time.monotonic() - started:.2f}s; peak {hog.stats().memory_peak_bytes}")
    assert eater.returncode == -9 and "survived" not in out
    assert hog.oom_killed() and not calm.oom_killed()
    assert neighbour.poll() is None
    neighbour.kill()
    neighbour.wait()


def test_a_job_cannot_widen_its_cpuset(layout: Layout) -> None:
    need(layout, "cpus")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    g = group(layout, "cpuset", Limits(cpus=(0,)))
    code = (
        "import os\ntry:\n    os.sched_setaffinity(0, {0, 1})\nexcept OSError as e:\n    print('refused', e.errno)\n"
        "print(sorted(os.sched_getaffinity(0)))"
    )
    out = subprocess.run([PY, "-c", code], preexec_fn=g.add_self, capture_output=True, text=True, timeout=20).stdout
    assert out.strip().splitlines()[-1] == "[0]"


def test_a_fraction_of_a_core_is_held_to_its_quota(layout: Layout) -> None:
    """0.2 of a core (cpu.max, or the v1 CFS quota): a busy loop of 1.5 s wall gets about 0.3 s
    of CPU; unthrottled it would get about 1.5 s."""
    need(layout, "cpu quota")
    g = group(layout, "quota", Limits(cpu_milli=200))
    code = "import time\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end: pass\nprint(time.process_time())"
    out = subprocess.run([PY, "-c", code], preexec_fn=g.add_self, capture_output=True, text=True, timeout=20).stdout
    used = float(out.strip().splitlines()[-1])
    print(f"CPU time of 1.5 s busy at 0.2 core: {used:.2f} s")
    assert used < 0.6


def test_a_pids_limit_stops_a_fork_loop(layout: Layout) -> None:
    need(layout, "pids")
    g = group(layout, "pids", Limits(pids_max=16))
    code = (
        "import os, sys, time\nn = 0\nfor _ in range(100):\n    try:\n        pid = os.fork()\n"
        "    except OSError as e:\n        print(n, e.errno, flush=True)\n        break\n"
        "    if pid == 0:\n        os.close(1)\n        time.sleep(60)\n        os._exit(0)\n    n += 1\n"
        "else:\n    print(n, 0, flush=True)\ntime.sleep(60)\n"
    )
    with start(g, code, stdout=subprocess.PIPE) as p:
        forks, err = map(int, p.stdout.readline().split())  # type: ignore[union-attr]
        g.kill()
        assert g.wait_empty(5)
    assert forks == 15 and err == errno.EAGAIN  # 16 tasks: the loop itself and 15 children


@pytest.mark.parametrize("which", ["layout", "v1_layout"])
def test_kill_leaves_nothing_that_left_the_session(which: str, request: pytest.FixtureRequest) -> None:
    lay: Layout = request.getfixturevalue(which)
    need(lay, "kill")
    g = group(lay, f"kill-{which}")
    code = (
        "import os, subprocess, time\n"
        "subprocess.run(['sh', '-c', 'setsid sleep 300 >/dev/null 2>&1 & nohup sleep 300 >/dev/null 2>&1 &'])\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.close(1)\n        time.sleep(300)\n"
        "    os._exit(0)\n"
        "time.sleep(0.2)\nprint('ready', flush=True)\ntime.sleep(300)\n"
    )
    with start(g, code, stdout=subprocess.PIPE) as p:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        members = g.pids()
        started = time.monotonic()
        g.kill()
        emptied = g.wait_empty(5)
        took = time.monotonic() - started
    assert len(members) >= 4  # the job, setsid sleep, nohup sleep, the double-forked one
    assert emptied
    print(f"{lay.mechanism('kill')}: {len(members)} processes gone in {took * 1000:.1f} ms")
    assert took < 1.0
    deadline = time.monotonic() + 2  # orphans are reaped by whoever is init here
    while live(members) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert live(members) == set()
    assert g.remove()


def test_a_job_gets_its_gpu_and_not_another(layout: Layout, tmp_path: Path) -> None:
    """Stand-in GPUs with the NVIDIA major (195) and no driver behind it: opening one gives ENXIO
    (no such device) unless the devices cgroup refuses it first, with EPERM."""
    need(layout, "devices")
    for minor in (0, 1):
        os.mknod(tmp_path / f"nvidia{minor}", 0o666 | stat.S_IFCHR, os.makedev(195, minor))
    gpus = [str(tmp_path / f"nvidia{m}") for m in (0, 1)]
    code = (
        "import sys\nfor path in sys.argv[1:]:\n    try:\n        open(path, 'rb').close()\n        print(0)\n"
        "    except OSError as e:\n        print(e.errno)\n"
    )
    outside = subprocess.run([PY, "-c", code, *gpus], capture_output=True, text=True, timeout=20).stdout.split()
    assert outside == [str(errno.ENXIO)] * 2
    g = group(layout, "devices", Limits(devices_allow=(gpus[1],), devices_deny=(gpus[0],)))
    inside = subprocess.run([PY, "-c", code, *gpus], preexec_fn=g.add_self, capture_output=True, text=True, timeout=20)
    assert inside.stdout.split() == [str(errno.EPERM), str(errno.ENXIO)]


OPEN_EACH = (
    "import sys\nfor path in sys.argv[1:]:\n    try:\n        open(path, 'rb').close()\n        print(0)\n"
    "    except OSError as e:\n        print(e.errno)\n"
)


def stand_ins(where: Path, minors: tuple[int, ...] = (0, 1, 2, 255)) -> list[str]:
    """Device files with NVIDIA's major 195 and no driver behind them (195:255 is nvidiactl's)."""
    for minor in minors:
        os.mknod(where / f"nvidia{minor}", 0o666 | stat.S_IFCHR, os.makedev(195, minor))
    return [str(where / f"nvidia{m}") for m in minors]


@pytest.mark.parametrize("v1_devices", [True, False], ids=["with-v1-devices", "device-program-alone"])
def test_the_device_program_refuses_other_gpus_and_mknod_but_keeps_the_driver_files(
    layout: Layout, tmp_path: Path, v1_devices: bool
) -> None:
    """The unified group's BPF program alone (the v1 devices controller out of the way, as on a
    pure cgroup v2 server) holds the wall: GPU 0's file and a node made with mknod for a GPU the
    node does not list are refused (EPERM); the job's GPU 1 and nvidiactl reach the (absent)
    driver (ENXIO)."""
    if not layout.device_program:
        pytest.skip(f"no cgroup v2 device program here: {layout.notes}")
    lay = layout if v1_devices else replace(layout, v1={c: m for c, m in layout.v1.items() if c != "devices"})
    assert ("cgroup v1 devices" in lay.mechanism("devices")) is v1_devices
    zero, one, two, ctl = stand_ins(tmp_path)
    limits = Limits(devices_allow=(one,), devices_deny=(zero,), devices_keep=(ctl,))
    g = WorkerGroup(lay, node(layout), f"program-{v1_devices}")
    g.create(limits)
    code = (
        OPEN_EACH + "import os\nos.mknod(sys.argv[1] + '-made', 0o600 | 0o20000, os.makedev(195, 0))\nprint('made')\n"
    )
    inside = subprocess.run(
        [PY, "-c", code, zero, one, two, ctl, "/dev/null"],
        preexec_fn=g.add_self,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert inside.stdout.split()[:5] == [str(errno.EPERM), str(errno.ENXIO), str(errno.EPERM), str(errno.ENXIO), "0"]
    assert "made" not in inside.stdout and "PermissionError" in inside.stderr  # mknod of a denied GPU
    outside = subprocess.run([PY, "-c", OPEN_EACH, zero, two], capture_output=True, text=True, timeout=20)
    assert outside.stdout.split() == [str(errno.ENXIO)] * 2  # the parent is untouched
    g.remove()


def test_device_rules_deny_the_gpus_major_except_the_jobs_own_and_the_driver(tmp_path: Path) -> None:
    from gpupool.node.devices import Rule, gpu_rules, program

    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    zero, one, two, ctl = stand_ins(tmp_path)
    uvm = tmp_path / "nvidia-uvm"  # a driver file of a major no rule denies: nothing to allow it for
    os.mknod(uvm, 0o666 | stat.S_IFCHR, os.makedev(234, 0))
    rules = gpu_rules([one], [zero, two], [ctl, str(uvm), str(tmp_path / "gone")])  # a file that vanished: skipped
    assert rules == [
        Rule(True, "c", 195, 1),
        Rule(True, "c", 195, 255),
        Rule(False, "c", 195, 0),
        Rule(False, "c", 195, 2),
        Rule(False, "c", 195, None),
    ]
    assert len(program(rules)) == 8 * (
        4 + 4 * 5 + 4 + 2
    )  # 8-byte instructions: head, 4 rules of 5, the wildcard, default
    assert gpu_rules([], [], []) == []


@pytest.mark.parametrize("which", ["layout", "v1_layout"])
def test_stats_show_a_busy_worker(which: str, request: pytest.FixtureRequest) -> None:
    layout: Layout = request.getfixturevalue(which)
    g = group(layout, f"stats-{which}", Limits(memory_mib=256))
    # CPU time, not wall time: other work on a loaded two-core machine must not make it flaky
    code = "import time\nx = b'x' * (32 * 2**20)\nwhile time.process_time() < 0.3:\n    pass\n"
    subprocess.run([PY, "-c", code], preexec_fn=g.add_self, check=True, timeout=20)
    s = g.stats()
    print(s)
    assert s.cpu_seconds is not None and s.cpu_seconds >= 0.3
    if layout.mechanism("memory") != "none":
        assert s.memory_peak_bytes is not None and s.memory_peak_bytes > 32 * 2**20
        assert s.memory_bytes is not None


def test_create_refuses_what_it_cannot_enforce(layout: Layout) -> None:
    """A cpuset naming a core the machine lacks fails the launch instead of running unpinned."""
    need(layout, "cpus")
    g = WorkerGroup(layout, node(layout), "bad-cpus")
    with pytest.raises(CgroupError, match=r"cpuset\.cpus"):
        g.create(Limits(cpus=(4095,)))
    assert all(not os.path.exists(d) for d in g.dirs.values())


def test_teardown_never_raises_on_a_group_that_is_not_there(layout: Layout) -> None:
    g = WorkerGroup(replace(layout), node(layout), "never-made")
    g.kill()
    assert g.wait_empty(0.1)
    assert g.remove()
    assert not g.oom_killed()

"""A job's walls on its node, through the node runtime and real supervisors (issue 29): a private
/tmp and /dev/shm that count against --memory, are invisible to another user's job, are shared by
the workers of one gang and are gone when the job ends however it ended; a /proc that hides other
accounts; GPU device files walled by the cgroup v2 device program with stand-in GPUs; and no job
as root or a system account unless the head allows it.

Needs root (jobs as other accounts, mount namespaces, cgroups); each test skips saying why
elsewhere. The node's data dir is under /tmp, as pytest's are: the walls must not hide it from
the supervisor."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.node.runtime import NodeRuntime
from tests.support.headproc import wait_for
from tests.support.unix_accounts import TestAccounts
from tests.support.workers import finish, log, namespace_alive, request, said, walled_runtime

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a job's private namespace and accounts need root")

SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture
def dev() -> Iterator[Path]:
    """Where the node looks for GPU device files: outside /tmp (a job's /tmp is its own) and
    reachable by the test's accounts."""
    path = Path(f"/var/tmp/gpupool-test-dev-{os.getpid()}")
    path.mkdir(mode=0o755, exist_ok=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def rt(tmp_path: Path, dev: Path) -> Iterator[NodeRuntime]:
    path = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    with walled_runtime("ns1", tmp_path / "node", 3, base_env=path, device_dir=dev) as runtime:
        yield runtime


def shmem_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no Shmem in /proc/meminfo")


def test_tmp_and_shm_are_the_jobs_own_unseen_by_another_user_and_gone_at_its_end(
    rt: NodeRuntime, unix_accounts: TestAccounts
) -> None:
    ann, ben = unix_accounts.make("ann"), unix_accounts.make("ben")
    before = shmem_mib()
    writer = rt.launch(
        request(
            1,
            "echo secret > /tmp/ann-file; echo secret > /dev/shm/ann-shm; head -c 100000000 /dev/zero > /dev/shm/big;"
            " echo OWN=$(stat -c '%U %a' /tmp /dev/shm); echo NS=$(readlink /proc/self/ns/mnt);"
            " echo READY=1; sleep 3",
            account=ann,
        )
    )
    ns = said(rt, 1, "NS")
    said(rt, 1, "READY")
    during = shmem_mib()
    looker = rt.launch(request(2, "echo SEEN=$(ls -A /tmp /dev/shm | tr '\\n' ' ')", account=ben))
    assert finish(rt, looker).exit_code == 0, log(rt, 2)
    assert finish(rt, writer).exit_code == 0, log(rt, 1)
    assert said(rt, 1, "OWN") == f"{ann} 700 {ann} 700"
    seen = said(rt, 2, "SEEN")
    assert "ann" not in seen and "big" not in seen, seen
    assert "ann" not in " ".join(os.listdir("/tmp") + os.listdir("/dev/shm"))  # nothing reached the host's
    assert during - before > 90, (before, during)  # the 100 MB were in memory, in the job's tmpfs
    wait_for(lambda: not namespace_alive(ns), timeout=10, what="the job's namespace to go")
    assert during - shmem_mib() > 90  # and were given back with it


@pytest.mark.parametrize("where", ["/dev/shm", "/tmp"])
def test_writes_to_tmp_or_shm_count_against_memory_and_end_oom(
    rt: NodeRuntime, unix_accounts: TestAccounts, where: str
) -> None:
    ann = unix_accounts.make("ann")
    ended = finish(
        rt,
        rt.launch(
            request(3, f"head -c 200000000 /dev/zero > {where}/fill && echo survived", account=ann, memory_mib=64)
        ),
    )
    assert ended.reason == "oom", (ended, log(rt, 3))
    assert "survived" not in log(rt, 3)


@pytest.mark.parametrize("how", ["sigkill", "cancel"])
def test_the_namespace_is_gone_after_sigkill_of_the_worker_or_a_cancel(
    rt: NodeRuntime, unix_accounts: TestAccounts, how: str
) -> None:
    ann = unix_accounts.make("ann")
    script = "head -c 50000000 /dev/zero > /dev/shm/left; (setsid sleep 300 &); echo NS=$(readlink /proc/self/ns/mnt); sleep 300"
    handle = rt.launch(request(4, script, account=ann, grace_s=0.5))
    ns = said(rt, 4, "NS")
    if how == "sigkill":
        child = Path(handle.run_dir) / "child.json"
        os.kill(int(json.loads(child.read_text())["pid"]), signal.SIGKILL)
    else:
        rt.kill(handle)
    finish(rt, handle)
    wait_for(lambda: not namespace_alive(ns), timeout=10, what="the job's namespace to go")  # the setsid sleep too


def test_the_workers_of_one_gang_on_one_node_share_shm_and_tmp(rt: NodeRuntime, unix_accounts: TestAccounts) -> None:
    ann = unix_accounts.make("ann")
    first = rt.launch(
        request(
            5,
            "echo from-0 > /dev/shm/w0; echo from-0 > /tmp/w0; echo NS=$(readlink /proc/self/ns/mnt); sleep 4",
            account=ann,
        )
    )
    ns = said(rt, 5, "NS")
    second = rt.launch(
        request(
            5,
            "sleep 0.5; echo GOT=$(cat /dev/shm/w0 /tmp/w0); echo NS=$(readlink /proc/self/ns/mnt)",
            account=ann,
            worker=1,
        )
    )
    assert finish(rt, second).exit_code == 0, log(rt, 5, 1)
    assert said(rt, 5, "GOT", 1) == "from-0 from-0"
    assert said(rt, 5, "NS", 1) == ns
    finish(rt, first)


def test_proc_shows_a_job_only_its_own_accounts_processes(rt: NodeRuntime, unix_accounts: TestAccounts) -> None:
    ann, ben = unix_accounts.make("ann"), unix_accounts.make("ben")
    bens = rt.launch(request(6, "echo UP=1; exec sleep 37", account=ben))
    said(rt, 6, "UP")
    anns = rt.launch(
        request(7, "sleep 36 & echo SEEN=$(cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ')", account=ann)
    )
    assert finish(rt, anns).exit_code == 0, log(rt, 7)
    seen = said(rt, 7, "SEEN")
    assert "sleep 36" in seen and "sleep 37" not in seen, seen  # ann's own, not ben's
    rt.kill(bens)
    finish(rt, bens)


def test_a_working_directory_under_tmp_stays_where_it_is(
    rt: NodeRuntime, unix_accounts: TestAccounts, tmp_path: Path
) -> None:
    """``cd /tmp/proj && gpupool submit ...``: the working directory is bound into the private /tmp."""
    ann = unix_accounts.make("ann")
    project = Path(f"/tmp/gpupool-test-wd-{os.getpid()}")
    project.mkdir(exist_ok=True)
    os.chmod(project, 0o777)
    (project / "input").write_text("data\n")
    try:
        handle = rt.launch(
            request(
                8,
                "echo WD=$(pwd) $(cat input); echo out > output; ls -A /tmp | tr '\\n' ' '",
                account=ann,
                workdir=str(project),
            )
        )
        assert finish(rt, handle).exit_code == 0, log(rt, 8)
        assert said(rt, 8, "WD") == f"{project} data"
        assert (project / "output").read_text() == "out\n"
        assert log(rt, 8).splitlines()[-1].split() == [project.name]  # nothing else of the host's /tmp
    finally:
        for f in project.iterdir():
            f.unlink()
        project.rmdir()


def stand_in_gpus(dev: Path) -> list[str]:
    """/dev/nvidia0..2 and nvidiactl as the node sees them: NVIDIA's major 195, no driver behind."""
    for name, minor in (("nvidia0", 0), ("nvidia1", 1), ("nvidia2", 2), ("nvidiactl", 255)):
        os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(195, minor))
    return [str(dev / n) for n in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl")]


PROBE = (
    "import os, sys\n"
    "def tried(p):\n    try:\n        open(p, 'rb').close()\n        return 0\n    except OSError as e:\n        return e.errno\n"
    "print('ERRNO=' + ' '.join(str(tried(p)) for p in sys.argv[1:]))\n"
    "print('CUDA=' + os.environ.get('CUDA_VISIBLE_DEVICES', '-'))\n"
)


@pytest.mark.parametrize("gpus", ["1", ""], ids=["gpu-1", "no-gpu"])
def test_a_job_reaches_exactly_its_gpu_device_files(
    rt: NodeRuntime, unix_accounts: TestAccounts, dev: Path, gpus: str
) -> None:
    """GPU 1's job opens its own file and nvidiactl (ENXIO: no driver behind the stand-ins) and
    gets EPERM for GPU 0 and 2; a --gpus 0 job gets EPERM for every GPU. CUDA is told the job's
    GPU as device 0: CUDA counts only the devices a process can open."""
    if rt.layout is None or rt.layout.mechanism("devices") == "none":
        pytest.skip(f"this node walls no devices: {rt.layout and rt.layout.notes}")
    files = stand_in_gpus(dev)
    ann = unix_accounts.make("ann")
    job = rt.launch(request(9, "", account=ann, gpus=gpus, argv=(SYSTEM_PYTHON, "-c", PROBE, *files)))
    assert finish(rt, job).exit_code == 0, log(rt, 9)
    own = [str(errno.ENXIO if gpus == "1" else errno.EPERM)]
    assert said(rt, 9, "ERRNO").split() == [str(errno.EPERM), *own, str(errno.EPERM), str(errno.ENXIO)]
    assert said(rt, 9, "CUDA") == ("0" if gpus else "")


@pytest.mark.parametrize(("account", "allowed"), [("root", False), ("daemon", False), ("root", True)])
def test_a_node_refuses_root_and_system_accounts_unless_allowed(rt: NodeRuntime, account: str, allowed: bool) -> None:
    ended = finish(rt, rt.launch(request(10, "id -un", account=account, allow_system_account=allowed)))
    if allowed:
        assert ended.exit_code == 0 and log(rt, 10).splitlines()[-1] == account
        return
    assert (ended.exit_code, ended.reason) == (126, "system_account"), ended
    assert "--allow-system-accounts" in log(rt, 10)


def test_a_worker_that_cannot_be_started_says_which_step_failed(rt: NodeRuntime, unix_accounts: TestAccounts) -> None:
    """Between fork and exec only a failure can be told to the parent: the child writes which step
    failed to the log, and the exit is 126 (it used to take the supervisor down, leaving no exit)."""
    ann = unix_accounts.make("ann")
    closed = Path(f"/var/tmp/gpupool-test-closed-{os.getpid()}")
    closed.mkdir(mode=0o700, exist_ok=True)  # root's: ann cannot enter it
    try:
        ended = finish(rt, rt.launch(request(11, "echo ran", account=ann, workdir=str(closed))))
    finally:
        closed.rmdir()
    assert ended.exit_code == 126, (ended, log(rt, 11))
    assert f"cannot start the worker: entering {closed} as {ann} failed" in log(rt, 11)
    assert "ran" not in log(rt, 11).splitlines()[-1]

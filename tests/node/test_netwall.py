"""Served ports answer the gateway only (issue 30, part 2), on real workers of a node runtime: a
port a job serves refuses every other job's connect (EPERM), on this node by port whatever address
is asked, and on another node once the head hands its ports over; the job's own workers and
anything outside the workers (the gateway, health checks, this test) still connect.

Needs root and cgroup v2 connect programs; each test skips saying why elsewhere."""

from __future__ import annotations

import errno
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.domain.launch import LaunchRequest, WorkerExit, WorkerHandle
from gpupool.node import rundir
from gpupool.node.gpu.fake import FakeProbe
from gpupool.node.runtime import NodeRuntime
from tests.support import DIAL
from tests.support.dial import dialed
from tests.support.headproc import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="connect programs on cgroups need root")


def runtime_at(where: Path, python: str = sys.executable) -> NodeRuntime:
    return NodeRuntime(
        name="nw1",
        address="127.0.0.1",
        probe=FakeProbe("nw1", 2),
        data_dir=where,
        base_env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cpus=1,
        memory_mib=0,
        host_cpus=sorted(os.sched_getaffinity(0)),
        python=python,
    )


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[NodeRuntime]:
    runtime = runtime_at(tmp_path / "node")
    if runtime.netwall is None:
        pytest.skip(f"no connect programs here: {runtime.walls.network_why}")
    yield runtime
    runtime.close()


def listener(host: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((host, 0))
    sock.listen(16)
    return sock


def launch(rt: NodeRuntime, job_id: int, targets: list[str], worker: int = 0, port: int | None = None) -> WorkerHandle:
    return rt.launch(
        LaunchRequest(
            job_id=job_id,
            attempt=1,
            worker=worker,
            argv=(sys.executable, DIAL, *targets),
            env={},
            workdir=None,
            cpus=(),
            gpus=(),
            memory_mib=0,
            grace_s=1.0,
            header=f"--- job {job_id} ---",
            port=port,
        )
    )


def tried(rt: NodeRuntime, job_id: int, handle: WorkerHandle, worker: int = 0) -> dict[str, int]:
    ended: WorkerExit = wait_for(lambda: rt.poll(handle), 30, 0.05, "the worker's exit")
    text = rt.read_log(job_id, worker).decode()
    assert ended.exit_code == 0, text
    return dialed(text)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


SERVE_THEN_WAIT = (
    "import socket, sys, time\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(16)\n"
    "print('LISTENING', flush=True)\n"
    "time.sleep(60)\n"
)


def test_a_served_port_refuses_other_jobs_whatever_address_and_lets_its_own_job_through(rt: NodeRuntime) -> None:
    port = free_port()
    server = rt.launch(
        LaunchRequest(
            job_id=1,
            attempt=1,
            worker=0,
            argv=(sys.executable, "-c", SERVE_THEN_WAIT, str(port)),
            env={},
            workdir=None,
            cpus=(),
            gpus=(),
            memory_mib=0,
            grace_s=1.0,
            header="--- job 1 ---",
            port=port,
        )
    )
    assert server.port == port  # walled at launch, and kept for a restarted head
    wait_for(lambda: b"LISTENING" in rt.read_log(1, 0), 30, 0.05, "the server to listen")
    assert rt.netwall is not None and rt.layout is not None and rt.layout.unified is not None
    group = Path(rt.layout.unified, rt.layout.parent, str(rundir.read_spec(Path(server.run_dir)).cgroup))
    group_id = group.stat().st_ino
    assert rt.netwall.workers.get((group_id,)) == (1,)  # its group is known as job 1's
    targets = [f"127.0.0.1:{port}", f"127.0.0.2:{port}", f"[::1]:{port}"]
    other = tried(rt, 2, launch(rt, 2, targets))
    assert other[f"127.0.0.1:{port}"] == errno.EPERM
    assert other[f"127.0.0.2:{port}"] == errno.EPERM  # another of the node's addresses: the same port
    assert other[f"[::1]:{port}"] in (errno.EPERM, errno.ECONNREFUSED, errno.EADDRNOTAVAIL, errno.ENETUNREACH)
    own = tried(rt, 1, launch(rt, 1, targets[:1], worker=1), worker=1)
    assert own[f"127.0.0.1:{port}"] == 0  # the job's own worker
    socket.create_connection(("127.0.0.1", port), timeout=5).close()  # outside the workers: the gateway's place
    free = listener()
    free_target = f"127.0.0.1:{free.getsockname()[1]}"
    assert tried(rt, 3, launch(rt, 3, [free_target]))[free_target] == 0  # a port nobody serves
    rt.kill(server)
    wait_for(lambda: rt.poll(server), 30, 0.05, "the server's exit")
    assert tried(rt, 4, launch(rt, 4, targets[:1]))[targets[0]] == errno.ECONNREFUSED  # no longer walled
    assert not group.exists() and rt.netwall.workers.get((group_id,)) is None  # forgotten with its group gone
    free.close()


def test_a_port_something_already_listens_on_never_becomes_a_jobs(rt: NodeRuntime) -> None:
    """A job that names the head's own port (``--expose 8000``) must not wall everyone else off it."""
    head_api = listener("0.0.0.0")
    port = head_api.getsockname()[1]
    handle = launch(rt, 5, [], port=port)
    assert handle.port is None
    tried(rt, 5, handle)
    target = f"127.0.0.1:{port}"
    assert tried(rt, 6, launch(rt, 6, [target]))[target] == 0
    privileged = launch(rt, 7, [], port=80)
    assert privileged.port is None
    tried(rt, 7, privileged)
    head_api.close()


def test_ports_served_on_other_nodes_are_refused_once_the_head_hands_them_over(rt: NodeRuntime) -> None:
    far = "192.0.2.7"  # TEST-NET-1: never this machine's; walled by address and port
    rt.protect([(far, 9999, 78)])
    assert rt.netwall is not None
    assert rt.netwall.served.get((int.from_bytes(socket.inet_aton(far), "little"), socket.htons(9999))) == (78,)
    # Refused at connect, before a packet leaves, however the address is written (unwalled, a
    # connect to TEST-NET-1 would fail otherwise: unreachable, or a timeout).
    far_targets = [f"{far}:9999", f"[::ffff:{far}]:9999"]
    assert tried(rt, 11, launch(rt, 11, far_targets)) == dict.fromkeys(far_targets, errno.EPERM)
    remote = listener("127.0.0.3")  # another node's replica, as far as this node can tell
    target = f"127.0.0.3:{remote.getsockname()[1]}"
    assert tried(rt, 8, launch(rt, 8, [target]))[target] == 0  # not known yet
    rt.protect([("127.0.0.3", remote.getsockname()[1], 77)])
    elsewhere = f"127.0.0.4:{remote.getsockname()[1]}"  # the same machine: any of its addresses
    assert tried(rt, 9, launch(rt, 9, [target, elsewhere])) == {target: errno.EPERM, elsewhere: errno.EPERM}
    assert tried(rt, 77, launch(rt, 77, [target]))[target] == 0  # the job that serves it, from this node
    rt.protect([])  # the replica is gone: the port is anyone's again
    assert tried(rt, 10, launch(rt, 10, [target]))[target] == 0
    remote.close()


def test_a_port_served_here_is_not_taken_over_or_dropped_by_the_other_nodes_list(rt: NodeRuntime) -> None:
    """Several virtual nodes on one machine key each other's ports by port alone, as their own:
    the list the head hands over never overwrites nor drops a port this node serves, and a port
    this node stops serving falls back to the other node's entry it had shadowed."""
    wall = rt.netwall
    assert wall is not None
    ours, theirs = free_port(), free_port()

    def owner(port: int) -> tuple[int, ...] | None:
        return wall.served.get((0, socket.htons(port)))

    wall.serve(ours, 5)
    rt.protect([("127.0.0.1", ours, 9)])  # a stale entry from the head: the port was another node's
    assert owner(ours) == (5,)
    rt.protect([])
    assert owner(ours) == (5,)
    rt.protect([("127.0.0.1", theirs, 9)])
    wall.serve(theirs, 6)
    assert owner(theirs) == (6,)
    wall.stop_serving(theirs)
    assert owner(theirs) == (9,)  # the other node's again
    wall.stop_serving(ours)
    assert owner(ours) is None
    rt.protect([])
    assert owner(theirs) is None


def test_a_launch_whose_supervisor_cannot_start_leaves_its_port_unwalled(tmp_path: Path) -> None:
    """The port is walled before the supervisor starts; a start that fails (here: no such Python)
    lets it go again, else the port would stay walled as a job's that never ran."""
    broken = runtime_at(tmp_path / "node", python=str(tmp_path / "no-python"))
    try:
        if broken.netwall is None:
            pytest.skip(f"no connect programs here: {broken.walls.network_why}")
        port = free_port()
        with pytest.raises(OSError):
            launch(broken, 3, [], port=port)
        assert broken.netwall.served.get((0, socket.htons(port))) is None
    finally:
        broken.close()

"""Several gateway processes on one port (``python -m gpupool.gateway --processes N``).

One process carries a trivial request in ~100 µs of CPU, nearly all of it system calls and the
event loop; past one core, more requests need more processes. The first binds the port, then N
sockets on it with ``SO_REUSEPORT``: the kernel spreads new connections over them (by a hash of the
addresses), and each process accepts from its own socket, with no lock, no hand-off and no thread.
The first process forks the others before any loop or thread exists, waits until each says it
serves (one byte on a pipe) before printing the ready line, and stops them when it stops.

What each process holds alone, and how the guarantees still hold:

- a replica's cap and a route's queue: each process has its share (``pool.Part``), the shares
  add up to the cap and the queue limit;
- the token answers it keeps (``--auth-ttl``): each asks the head itself, so a revoked token
  fails within the same time in every process;
- the door's connection cap: each has its share of ``--max-connections``;
- the load reported to the head: only the first posts; each other hands it its report over a pipe
  of its own (made before the fork), and the first merges them into its own (``gather.py``), so
  the autoscaler sees the whole gateway's load, once per interval.

Per process, and said so in the guide: the failed-sign-in limit, and ``/metrics`` (a scrape reads
the process that took its connection).

A forked process stops when the first is gone (its parent changes), as the first stops when the
head is gone (``--parent``): a head killed with SIGKILL leaves no gateway process behind.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpupool.gateway.pool import Part

log = logging.getLogger("gpupool.gateway")
MAX_PROCESSES = 64
READY_S = 30.0


@dataclass
class Place:
    """Where one process of the gateway stands: its socket (None: it binds its own, one process),
    its part, the pipe it says it serves on (the forked ones), the processes it forked (the first)."""

    sock: socket.socket | None = None
    part: Part = field(default_factory=Part)
    ready_fd: int | None = None
    children: list[int] = field(default_factory=list)
    first: int | None = None  # a forked one's: the first process, whose end ends it
    report_fd: int | None = None  # a forked one's: the pipe its load reports go by (non-blocking)
    reports: list[int] = field(default_factory=list)  # the first's: the others' report pipes (non-blocking)

    def served(self) -> None:
        """Say this process serves: to the first process, by pipe (the first prints the line)."""
        if self.ready_fd is not None:
            os.write(self.ready_fd, b"+")
            os.close(self.ready_fd)
            self.ready_fd = None


def listen(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` listening sockets on one port (``port`` 0: the first's free one), ``SO_REUSEPORT``."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # as asyncio's create_server
            sock.bind(address)
            address = sock.getsockname()  # the port the first got, for the others
            sock.listen(1024)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def run_all(host: str, port: int, count: int, run: Callable[[Place], int]) -> int:
    """Bind, fork ``count - 1`` processes that each ``run`` their place, run the first's; its
    exit code. A process that fails before it serves fails the whole start (exit code 2)."""
    sockets = listen(host, port, count)
    read_fd, write_fd = os.pipe()
    pipes = [os.pipe() for _ in range(1, count)]  # (read, write): each forked one's load reports
    children: list[int] = []
    first = os.getpid()
    for index in range(1, count):
        pid = os.fork()
        if pid == 0:  # the forked process: its socket, its part; never returns
            code = 1
            try:
                os.close(read_fd)
                for other in sockets[:index] + sockets[index + 1 :]:
                    other.close()
                mine = _keep_one(pipes, index - 1)
                place = Place(sockets[index], Part(index, count), ready_fd=write_fd, first=first, report_fd=mine)
                code = run(place)
            finally:
                os._exit(code)
        children.append(pid)
    os.close(write_fd)
    for sock in sockets[1:]:
        sock.close()
    reports = _keep_read_ends(pipes)
    try:
        if not _all_ready(read_fd, len(children)):
            stop(children)
            sockets[0].close()
            print("gateway: a gateway process did not start (its reason is above)", file=sys.stderr, flush=True)
            return 2
        return run(Place(sockets[0], Part(0, count), children=children, reports=reports))
    finally:
        stop(children)
        for fd in reports:
            with contextlib.suppress(OSError):
                os.close(fd)


def _keep_one(pipes: list[tuple[int, int]], mine: int) -> int:
    """In a forked process: close every report pipe but its own's write end, returned non-blocking
    (a full pipe or a gone first process never stalls its loop: the report waits for the next)."""
    for i, (read, write) in enumerate(pipes):
        os.close(read)
        if i != mine:
            os.close(write)
    fd = pipes[mine][1]
    os.set_blocking(fd, False)
    return fd


def _keep_read_ends(pipes: list[tuple[int, int]]) -> list[int]:
    """In the first process: the report pipes' read ends, non-blocking (their write ends closed)."""
    for read, write in pipes:
        os.close(write)
        os.set_blocking(read, False)
    return [read for read, _ in pipes]


def _all_ready(read_fd: int, expected: int) -> bool:
    got, deadline = 0, time.monotonic() + READY_S
    try:
        while got < expected:
            if not select.select([read_fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                return False
            data = os.read(read_fd, 64)
            if not data:  # every writer is gone: a process exited before it served
                return False
            got += len(data)
        return True
    finally:
        os.close(read_fd)


def stop(children: list[int], timeout_s: float = 10.0) -> None:
    """SIGTERM each forked process, then SIGKILL what has not exited within ``timeout_s``; reaped."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    waiting = list(children)
    while waiting:
        for pid in list(waiting):
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == 0:
                    if time.monotonic() < deadline:
                        continue
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
            waiting.remove(pid)
        if waiting:
            time.sleep(0.02)
    children.clear()


def gone(children: list[int]) -> list[int]:
    """The forked processes that exited since the last call (reaped, and taken out of ``children``)."""
    out = []
    for pid in list(children):
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                continue
        children.remove(pid)
        out.append(pid)
    return out

"""Served ports answer the gateway only (issue 30): a job cannot connect to another job's replica
or published port, on its node or any other.

Every worker of a node runs in a cgroup below the node's own group (``node/cgroups.py``). The node
runtime attaches two programs to that group (``BPF_CGROUP_INET4_CONNECT`` and ``INET6_CONNECT``,
``BPF_PROG_TYPE_CGROUP_SOCK_ADDR``), which every ``connect()`` of every process of every worker
passes through, TCP and connected UDP alike. Two maps drive them:

- ``served``: the ports jobs serve, as (IPv4 address, port) -> the job's id. This node's own are
  keyed by port alone (address 0): reached through any of the node's addresses, loopback included.
  The head hands every node the others' (``protect``), so a job on one node cannot call a replica
  on another directly either.
- ``workers``: each worker's cgroup id -> its job's id, written by the runtime before the worker
  starts (it makes the group's directory itself).

A connect to a served port is allowed only from the job that serves it (its own workers); from any
other worker it fails with EPERM. The gateway, the head's health checks and anything else outside
the workers' groups are not affected. Over IPv6, this node's ports are checked by port, and an IPv4
address written as IPv6 (``::ffff:10.0.0.2``) as that IPv4 address; gpupool's nodes serve on IPv4
addresses, so other nodes' IPv6 addresses are not walled. What it does not cover: processes on a node that are not
gpupool's jobs (a person's shell there), unconnected UDP (``sendto``), and machines outside the
cluster: those need the site's firewall.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from collections.abc import Iterable

from gpupool.node import bpf
from gpupool.node.bpf import Jump, Label, asm, insn, load_map

_SOCK_ADDR = 18  # BPF_PROG_TYPE_CGROUP_SOCK_ADDR
_INET4_CONNECT, _INET6_CONNECT = 10, 11
_GET_CURRENT_CGROUP_ID, _MAP_LOOKUP = 80, 1
_ENTRIES = 16384  # served ports and workers of a node, and the cluster's other served ports
# bpf_sock_addr: user_ip4 at 4, user_ip6[4] at 8, user_port at 24 (network order, in the low 16 bits)
_USER_IP4, _USER_IP6, _USER_PORT = 4, 8, 24
_V4_MAPPED = -0x10000  # ::ffff:0:0/96's third word as loaded (bytes 00 00 ff ff, little-endian 0xffff0000)


class NetWall:
    """The programs and maps of one node's group; OSError where the kernel does not let it (not
    root, no cgroup v2, no BPF): the node then says so in its isolation."""

    def __init__(self, node_group: str) -> None:
        self.group = node_group
        self.served = bpf.HashMap("<II", "<Q", _ENTRIES)  # (ip, port) in network order -> job id
        self.workers = bpf.HashMap("<Q", "<Q", _ENTRIES)  # cgroup id -> job id
        self._remote: dict[tuple[int, int], int] = {}  # the other nodes' ports (protect): key -> job id
        self._here_served: dict[tuple[int, int], int] = {}  # this node's (serve): key -> job id
        self._local: dict[str, bool] = {}  # address -> whether it is this machine's
        self._progs: list[int] = []
        try:
            for attach_type, program in ((_INET4_CONNECT, self._program(True)), (_INET6_CONNECT, self._program(False))):
                prog = bpf.load(_SOCK_ADDR, program, attach_type, b"gpupool_netwall")
                self._progs.append(prog)
                bpf.detach_all(node_group, attach_type)  # a runtime before this one (a head restarted)
                bpf.attach(node_group, prog, attach_type)
        except OSError:
            self.close()
            raise

    def worker(self, group_dir: str, job_id: int) -> int:
        """A worker of ``job_id`` will run in ``group_dir`` (which must exist now): its group's id,
        to forget it by once the group is gone."""
        group_id = os.stat(group_dir).st_ino  # a cgroup2 directory's inode is its id
        self.workers.put((group_id,), (job_id,))
        return group_id

    def forget_worker(self, group_id: int) -> None:
        self.workers.drop((group_id,))

    def serve(self, port: int, job_id: int) -> None:
        """``job_id`` serves ``port`` on this node: only its own workers may connect to it. It
        shadows another node's entry for the port (a virtual node on this machine, keyed alike):
        the head's list may lag, but a port served here is this node's job's."""
        key = (0, socket.htons(port))
        self._here_served[key] = job_id
        self.served.put(key, (job_id,))

    def stop_serving(self, port: int) -> None:
        """``port`` is no longer served here: the entry it shadowed, if any, is back."""
        key = (0, socket.htons(port))
        self._here_served.pop(key, None)
        if key in self._remote:
            self.served.put(key, (self._remote[key],))
        else:
            self.served.drop(key)

    def protect(self, endpoints: Iterable[tuple[str, int, int]]) -> None:
        """The ports other nodes' jobs serve, as (address, port, job id): the set replaces the last.
        A node on this same machine (the local backend's virtual nodes) is reached through any of
        its addresses, so its ports are keyed by port alone, as this node's own are."""
        wanted: dict[tuple[int, int], int] = {}
        for address, port, job_id in endpoints:
            with contextlib.suppress(ValueError):
                ip = ipaddress.ip_address(address)
                if ip.version == 4:
                    where = 0 if self._here(address) else int.from_bytes(ip.packed, "little")
                    wanted[(where, socket.htons(port))] = job_id
        for key in self._remote.keys() - wanted.keys() - self._here_served.keys():
            self.served.drop(key)
        for key, job_id in wanted.items():
            if key not in self._here_served and self._remote.get(key) != job_id:
                self.served.put(key, (job_id,))
        self._remote = wanted

    def _here(self, address: str) -> bool:
        """Whether ``address`` is one of this machine's (it can be bound here)."""
        if address not in self._local:
            with socket.socket() as probe:
                try:
                    probe.bind((address, 0))
                    self._local[address] = True
                except OSError:
                    self._local[address] = False
        return self._local[address]

    def close(self) -> None:
        """Let go of this process's handles. The programs stay with the group while it lives, which
        is while a worker's group is in it (a head restarted re-adopts those); an empty one goes."""
        for prog in self._progs:
            with contextlib.suppress(OSError):
                os.close(prog)
        self._progs = []
        self.served.close()
        self.workers.close()
        with contextlib.suppress(OSError):
            os.rmdir(self.group)

    def _program(self, ipv4: bool) -> bytes:
        served, workers = self.served.fd, self.workers.fd

        def lookup(fd: int, key_at: int) -> list[bytes]:
            return [load_map(1, fd), insn(0xBF, 2, 10), insn(0x07, 2, imm=key_at), insn(0x85, imm=_MAP_LOOKUP)]

        exact: list[bytes | Jump | Label] = [
            insn(0x61, 2, 6, _USER_IP4),
            insn(0x63, 10, 2, -8),  # key.ip = the address asked for
            *lookup(served, -8),
            Jump(0x15, "by_port", dst=0),
            insn(0x79, 7, 0, 0),
            Jump(0x05, "whose"),
        ]
        # An IPv4 address written as IPv6 (::ffff:10.0.0.2, through an AF_INET6 socket): the same key.
        mapped: list[bytes | Jump | Label] = [
            insn(0x61, 2, 6, _USER_IP6),
            Jump(0x55, "by_port", dst=2),  # user_ip6[0] != 0
            insn(0x61, 2, 6, _USER_IP6 + 4),
            Jump(0x55, "by_port", dst=2),
            insn(0x61, 2, 6, _USER_IP6 + 8),
            insn(0xB4, 3, imm=_V4_MAPPED),  # w3 = 0xffff0000 (mov32: the upper half zero)
            Jump(0x5D, "by_port", dst=2, src=3),
            insn(0x61, 2, 6, _USER_IP6 + 12),
            insn(0x63, 10, 2, -8),  # key.ip = the IPv4 address inside
            *lookup(served, -8),
            Jump(0x15, "by_port", dst=0),
            insn(0x79, 7, 0, 0),
            Jump(0x05, "whose"),
        ]
        return asm(
            [
                insn(0xBF, 6, 1),  # r6 = ctx
                insn(0x61, 3, 6, _USER_PORT),
                insn(0x63, 10, 3, -4),  # key.port
                *(exact if ipv4 else mapped),
                Label("by_port"),
                insn(0x62, 10, 0, -8, 0),  # key.ip = 0: this node's own ports
                *lookup(served, -8),
                Jump(0x15, "allow", dst=0),  # not a served port
                insn(0x79, 7, 0, 0),  # r7 = the job that serves it
                Label("whose"),
                insn(0x85, imm=_GET_CURRENT_CGROUP_ID),
                insn(0x7B, 10, 0, -16),
                *lookup(workers, -16),
                Jump(0x15, "deny", dst=0),  # a worker gpupool does not know: not the server's
                insn(0x79, 1, 0, 0),
                Jump(0x5D, "deny", dst=1, src=7),  # another job's worker
                Jump(0x05, "allow"),
                Label("deny"),
                insn(0xB7, 0, imm=0),
                insn(0x95),
                Label("allow"),
                insn(0xB7, 0, imm=1),
                insn(0x95),
            ]
        )


def detach(node_group: str) -> None:
    """Take the connect programs off ``node_group`` (a node whose workers no longer need them)."""
    for attach_type in (_INET4_CONNECT, _INET6_CONNECT):
        bpf.detach_all(node_group, attach_type)

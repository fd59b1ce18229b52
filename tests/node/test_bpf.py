"""``node/bpf.py``'s program loading: a program the verifier accepts loads (without asking for
its log), and one it refuses says why (the log is asked for on the second try)."""

from __future__ import annotations

import os

import pytest

from gpupool.node import bpf
from gpupool.node.bpf import insn

_PROG_TYPE_CGROUP_DEVICE, _CGROUP_DEVICE = 15, 6


@pytest.fixture(autouse=True)
def _root() -> None:
    if os.geteuid() != 0:
        pytest.skip("loading a BPF program needs root")


def test_a_program_the_verifier_accepts_loads() -> None:
    allow_all = insn(0xB7, 0, 0, 0, 1) + insn(0x95)  # r0 = 1; exit
    fd = bpf.load(_PROG_TYPE_CGROUP_DEVICE, allow_all, _CGROUP_DEVICE, b"gpupool_test")
    assert fd >= 0
    os.close(fd)


def test_a_refused_program_says_the_verifiers_reason() -> None:
    no_answer = insn(0x95)  # exit, r0 never set
    with pytest.raises(bpf.BpfError, match=r"loading a program: .*: R0 !read_ok"):
        bpf.load(_PROG_TYPE_CGROUP_DEVICE, no_answer, _CGROUP_DEVICE, b"gpupool_test")

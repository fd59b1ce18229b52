"""The power budget at scheduling (issue 33): a job whose GPUs' limits would take the pool, or its
node, over its budget starts capped when its mode lets it, else waits with reason ``power`` and a
sentence of what is free. H100s: 700 W default, 70 W idle, 200 W lowest limit."""

from __future__ import annotations

from dataclasses import replace

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.launch import PowerSetting
from gpupool.domain.power_budget import PowerBudget
from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler import schedule
from tests.support.builders import node, pending, running, snapshot


def moded(job: PendingJob, mode: str | None) -> PendingJob:
    return replace(job, spec=replace(job.spec, gpu_power=mode))


def h100(name: str, gpus: int = 4):  # type: ignore[no-untyped-def]
    return node(name, gpus, model="NVIDIA H100 80GB HBM3")


def test_no_budget_no_power_reason() -> None:
    result = schedule(snapshot([h100("n1")], [pending(1, gpus=4)]))
    assert [s.job_id for s in result.starts] == [1]
    assert result.starts[0].power_cap_w is None


def test_a_max_job_over_the_cluster_budget_waits_with_what_is_free() -> None:
    # 4 idle GPUs count 280 W; a 2-GPU max job adds 2 x (700 - 70) = 1260 W: 1540 > 1500.
    snap = replace(snapshot([h100("n1")], [pending(1, gpus=2)]), power=PowerBudget(cluster_w=1500))
    result = schedule(snap)
    assert not result.starts
    reason = result.pending[1]
    assert reason.code is ReasonCode.POWER
    # The budget has 1500 - 140 (the two GPUs it would not take) = 1360 W free for it.
    assert reason.message.startswith("needs 1.4 kW at its GPUs' limits; the cluster's 1.5 kW budget has 1.36 kW free")
    assert "--gpu-power efficient" in reason.message


def test_a_flexible_job_starts_capped_to_fit() -> None:
    snap = replace(snapshot([h100("n1")], [moded(pending(1, gpus=2), "600W")]), power=PowerBudget(cluster_w=1000))
    result = schedule(snap)
    assert [s.job_id for s in result.starts] == [1]
    # (1000 - 280 + 140) / 2 = 430 W a GPU: the highest that fits.
    assert result.starts[0].power_cap_w == 430.0


def test_a_flexible_job_that_fits_is_not_capped() -> None:
    snap = replace(snapshot([h100("n1")], [moded(pending(1, gpus=2), "400W")]), power=PowerBudget(cluster_w=1000))
    assert schedule(snap).starts[0].power_cap_w is None  # 140 + 800 = 940 W


def test_never_below_the_gpus_lowest_limit() -> None:
    snap = replace(snapshot([h100("n1")], [moded(pending(1, gpus=4), "efficient")]), power=PowerBudget(cluster_w=700))
    result = schedule(snap)
    assert not result.starts
    assert result.pending[1].code is ReasonCode.POWER
    assert "capped to 200 W" in result.pending[1].message


def test_running_jobs_count_at_their_launch_setting() -> None:
    held = replace(running(9, ("n1", (0, 1))), power=(PowerSetting("limit", 300),))
    budget = PowerBudget(cluster_w=1800)
    # Held at 300 W: 2 x 300 + 2 x 70 = 740 counted; a 2-GPU max job adds 1260: 2000 > 1800.
    snap = replace(snapshot([h100("n1")], [pending(1, gpus=2)], [held]), power=budget)
    assert schedule(snap).pending[1].code is ReasonCode.POWER
    lower = replace(held, power=(PowerSetting("limit", 200),))  # 400 + 140 + 1260 = 1800: it fits
    snap = replace(snapshot([h100("n1")], [pending(1, gpus=2)], [lower]), power=budget)
    assert [s.job_id for s in schedule(snap).starts] == [1]


def test_the_second_job_of_a_cycle_sees_what_the_first_took() -> None:
    jobs = [pending(1, gpus=1), pending(2, gpus=1)]
    snap = replace(snapshot([h100("n1")], jobs), power=PowerBudget(cluster_w=1200))  # 280 + 630 = 910, + 630 > 1200
    result = schedule(snap)
    assert [s.job_id for s in result.starts] == [1]
    assert result.pending[2].code is ReasonCode.POWER


def test_a_node_budget_sends_the_job_to_another_node() -> None:
    nodes = [h100("n1", 2), h100("n2", 2)]
    budget = PowerBudget(nodes_w={"n1": 500})
    result = schedule(replace(snapshot(nodes, [pending(1, gpus=1)]), power=budget))
    assert [p.node for p in result.starts[0].placements] == ["n2"]


def test_a_node_budget_holds_a_job_that_fits_only_there() -> None:
    snap = replace(snapshot([h100("n1", 2)], [pending(1, gpus=1)]), power=PowerBudget(nodes_w={"n1": 500}))
    reason = schedule(snap).pending[1]
    assert reason.code is ReasonCode.POWER
    assert "n1's 500 W budget has 430 W free" in reason.message


def test_a_cpu_only_job_is_never_held_for_power() -> None:
    snap = replace(snapshot([h100("n1")], [pending(1, gpus=0, cpus=1)]), power=PowerBudget(cluster_w=1))
    assert [s.job_id for s in schedule(snap).starts] == [1]


def test_the_budget_does_not_count_down_nodes() -> None:
    from gpupool.domain.nodes import NodeState

    down = node("n2", 8, model="NVIDIA H100 80GB HBM3", state=NodeState.DOWN)
    snap = replace(snapshot([h100("n1"), down], [pending(1, gpus=1)]), power=PowerBudget(cluster_w=1000))
    assert [s.job_id for s in schedule(snap).starts] == [1]

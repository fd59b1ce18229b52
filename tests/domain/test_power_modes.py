"""The submit-time check of a limit in watts against the cluster's GPUs (issue 33)."""

from __future__ import annotations

import pytest

from gpupool.domain.errors import InvalidInput
from gpupool.domain.nodes import GpuInfo
from gpupool.domain.power import check_cluster_watts, family_range

H100 = GpuInfo(0, "a", "H100", 81559, False, power_min_w=200, power_max_w=700, power_default_w=700)
A100 = GpuInfo(1, "b", "A100", 40960, False, power_min_w=150, power_max_w=400, power_default_w=400)
UNKNOWN = GpuInfo(2, "c", "L4", 23034, False)


def test_a_limit_outside_every_models_range_is_refused_naming_each() -> None:
    with pytest.raises(InvalidInput) as refused:
        check_cluster_watts("100W", [H100, A100])
    assert (
        refused.value.message == "--gpu-power 100W is outside what the GPUs here allow: A100 150-400 W; H100 200-700 W"
    )
    assert refused.value.code == "power_out_of_range"
    check_cluster_watts("180W", [H100, A100])  # the A100 allows it
    check_cluster_watts("efficient", [H100])
    check_cluster_watts(None, [H100])


def test_a_model_that_reported_no_range_leaves_it_to_the_node() -> None:
    check_cluster_watts("100W", [H100, UNKNOWN])
    check_cluster_watts("100W", [])


def test_a_family_range_stands_in_where_the_gpu_said_nothing() -> None:
    assert (family_range("NVIDIA H100 80GB HBM3").default_w, family_range("A100-SXM4").default_w) == (700, 400)
    assert family_range("Simulated-H200").min_w == 200 and family_range("L4").default_w == 300

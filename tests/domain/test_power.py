"""GPU power's pure words (issue 33, ``domain/power.py``): modes as people write them, the family
default curve shaped like the H100 measured here, ``efficient`` as the least energy within the
allowed slowdown, the shared-GPU rule, what a setting counts against a budget."""

from __future__ import annotations

import pytest

from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import JobSpec
from gpupool.domain.launch import PowerSetting
from gpupool.domain.power import (
    PowerMode,
    PowerRange,
    budget_watts,
    capped_speed,
    default_curve,
    parse_mode,
    parse_watts,
    resolve,
    shared_setting,
)
from gpupool.domain.services import ServiceSpec

H100 = "NVIDIA H100 80GB HBM3"
H100_RANGE = PowerRange(200, 700, 700)


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        (None, PowerMode("max")),
        ("MAX", PowerMode("max")),
        (" efficient ", PowerMode("efficient")),
        ("400", PowerMode("watts", 400)),
        ("400W", PowerMode("watts", 400)),
        ("0.4kW", PowerMode("watts", 400)),
        ("350.4 w", PowerMode("watts", 350)),
    ],
)
def test_modes_as_people_write_them(text: str | None, mode: PowerMode) -> None:
    assert parse_mode(text) == mode
    assert parse_mode(mode.text) == mode  # the stored form reads back the same


@pytest.mark.parametrize(
    ("text", "said"), [("fast", "is not max, efficient"), ("0W", "out of range"), ("9kW", "out of range")]
)
def test_anything_else_is_refused_in_one_line(text: str, said: str) -> None:
    with pytest.raises(InvalidInput, match=said):
        parse_mode(text)


def test_a_job_keeps_its_mode_in_the_stored_form_and_a_cpu_only_job_has_none() -> None:
    assert JobSpec.create(command=["x"], gpus=1, gpu_power="0.4kW").gpu_power == "400W"
    assert JobSpec.create(command=["x"], gpus=1).gpu_power is None
    with pytest.raises(InvalidInput, match="--gpu-power needs GPUs"):
        JobSpec.create(command=["x"], gpus=0, gpu_power="efficient")


def test_efficient_on_the_h100_default_curve_is_the_measured_500_w_point_and_a_wider_slowdown_picks_900_mhz() -> None:
    curve = default_curve(H100, 700)
    assert not curve.calibrated and curve.points[0].setting == PowerSetting("limit", 700)
    point = curve.efficient()
    assert point.setting == PowerSetting("limit", 500) and point.speed >= 0.8 and point.energy < 0.9
    assert curve.efficient(0.25).setting == PowerSetting("clocks", 900)  # -23.5 % speed, -19 % energy
    assert curve.efficient(0.0).setting == PowerSetting("limit", 700)  # no slowdown allowed: max


def test_other_families_scale_the_shape_to_their_default_and_have_no_clock_points() -> None:
    curve = default_curve("NVIDIA A100-SXM4-40GB", 400)
    assert {p.setting.kind for p in curve.points} == {"limit"}
    assert curve.efficient().setting == PowerSetting("limit", 286)


def test_resolve_gives_none_at_max_a_limit_for_watts_and_checks_the_range() -> None:
    curve = default_curve(H100, 700)
    assert resolve(PowerMode("max"), curve, H100_RANGE, 0.2) is None
    assert resolve(PowerMode("watts", 400), curve, H100_RANGE, 0.2) == PowerSetting("limit", 400)
    assert resolve(PowerMode("watts", 700), curve, H100_RANGE, 0.2) is None  # the default is no setting
    assert resolve(PowerMode("efficient"), curve, H100_RANGE, 0.2) == PowerSetting("limit", 500)
    with pytest.raises(InvalidInput, match="outside what a NVIDIA H100 80GB HBM3 allows: 200-700 W"):
        resolve(PowerMode("watts", 150), curve, H100_RANGE, 0.2)


def test_a_shared_gpu_takes_the_highest_setting_all_its_jobs_allow() -> None:
    low, high, lock = PowerSetting("limit", 300), PowerSetting("limit", 500), PowerSetting("clocks", 900)
    assert shared_setting([low, high]) == high
    assert shared_setting([low, None]) is None  # one at max: the default
    assert shared_setting([lock, low]) == low  # a limit beats a clock lock, which would slow every job
    assert shared_setting([]) is None


def test_what_a_setting_counts_against_a_budget() -> None:
    curve = default_curve(H100, 700)
    assert budget_watts(None, curve, H100_RANGE) == 700
    assert budget_watts(PowerSetting("limit", 400), curve, H100_RANGE) == 400
    assert budget_watts(PowerSetting("clocks", 900), curve, H100_RANGE) == 435.0  # the measured draw there


def test_a_capped_gpu_follows_the_measured_shape() -> None:
    assert capped_speed(700, 700) == 1.0 and capped_speed(900, 700) == 1.0
    assert capped_speed(400, 700) == pytest.approx(0.689)
    assert capped_speed(450, 700) == pytest.approx((0.689 + 0.831) / 2)
    assert 0 < capped_speed(100, 700) < capped_speed(200, 700)


def test_budgets_in_watts() -> None:
    assert parse_watts("20kW") == 20000 and parse_watts("1500W") == 1500 and parse_watts("0") == 0
    with pytest.raises(InvalidInput, match="is not a power such as 20kW"):
        parse_watts("lots")


def test_a_services_replicas_run_in_its_power_mode() -> None:
    service = ServiceSpec.create(name="web", command=["serve"], gpus=1, gpu_power="0.5kW")
    assert service.gpu_power == "500W" and service.replica_spec().gpu_power == "500W"
    assert ServiceSpec.from_dict(service.to_dict()) == service
    with pytest.raises(InvalidInput, match="--gpu-power needs GPUs"):
        ServiceSpec.create(name="cpu", command=["serve"], gpus=0, gpu_power="efficient")

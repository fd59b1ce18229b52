"""Power in the simulator (issue 33), on hand-made traces worked out by hand: a budget that is never
exceeded and what it costs, capped jobs that run slower, max jobs that wait, energy turned into
money and CO2, the price/carbon CSV reader, and deferrable jobs that move to cleaner hours."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpupool.domain.errors import InvalidInput
from gpupool.domain.power import capped_speed
from gpupool.sim import power as sim_power
from gpupool.sim.cluster import uniform
from gpupool.sim.engine import simulate
from gpupool.sim.metrics import summarize
from gpupool.sim.power import PowerConfig
from gpupool.sim.signals import Signal, parse_signal
from gpupool.sim.trace import load

HEADER = "job_id,submit_time,duration,gpus,workers,project"
CLI = [sys.executable, "-m", "gpupool.cli.main", "simulate"]


def trace(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    return path


def finishes(result: object) -> dict[str, tuple[float | None, float | None]]:
    runs = result.runs.values()  # type: ignore[attr-defined]
    return {r.trace.job_id: (r.first_start, r.finish) for r in runs}


def test_energy_money_and_co2_of_one_job_by_hand(tmp_path: Path) -> None:
    """8 GPUs at 700 W for an hour: 5.6 kWh; at 0.25 a kWh and 400 g a kWh: 1.40 and 2.24 kg."""
    jobs = load(trace(tmp_path, ["A,0,3600,8,1,default"]))
    config = PowerConfig(price=Signal(constant=0.25), carbon=Signal(constant=400.0))
    f = summarize(simulate(jobs, uniform(1, 8, "H100"), power=config), 0.0)
    assert f["energy_kwh"] == pytest.approx(5.6)
    assert f["peak_kw"] == pytest.approx(5.6) and f["cluster_peak_kw"] == pytest.approx(5.6)
    assert f["energy_cost"] == pytest.approx(1.40) and f["co2_kg"] == pytest.approx(2.24)


def test_a_flexible_job_runs_capped_and_slower_a_max_job_waits(tmp_path: Path) -> None:
    nodes = uniform(2, 8, "H100")
    path = trace(tmp_path, ["A,0,1000,8,1,default", "B,0,1000,8,1,default"])
    budget = PowerConfig(budget_w=8 * 700 + 8 * 300)  # room for one job at max and one at 300 W
    waited = simulate(load(path), nodes, power=budget)
    assert finishes(waited) == {"A": (0, 1000), "B": (1000, 2000)}  # max never caps: B waits
    assert waited.power is not None and waited.power["power_waited_jobs"] == 1
    efficient = sim_power.assign_modes(load(path), {"efficient": 1.0}, seed=0)
    capped = simulate(efficient, nodes, power=budget)
    # A at efficient (500 W, speed 0.831), B capped to what is left (8,000 - 4,000) / 8 = 500 W too.
    (a_start, a_end), (b_start, b_end) = finishes(capped).values()
    assert a_start == b_start == 0 and a_end == pytest.approx(1000 / 0.831)
    assert b_end == pytest.approx(1000 / capped_speed(500, 700))
    tight = simulate(efficient, nodes, power=PowerConfig(budget_w=8 * 500 + 8 * 250))
    assert tight.power is not None and tight.power["power_capped_starts"] == 1  # B at 250 W
    assert finishes(tight)["B"][1] == pytest.approx(1000 / capped_speed(250, 700))


def test_a_budget_of_60_percent_is_kept_and_costs_jct(tmp_path: Path) -> None:
    rows = [f"J{i},{i * 60},{1800 + 300 * (i % 5)},{(1, 2, 4, 8)[i % 4]},1,default" for i in range(60)]
    nodes = uniform(4, 8, "H100")
    for mix in ({}, {"max": 0.5, "efficient": 0.5}):
        jobs = sim_power.assign_modes(load(trace(tmp_path, rows)), mix, seed=3)
        budget = sim_power.parse_budget("60%", nodes, {})
        assert budget == pytest.approx(0.6 * 32 * 700)
        free = summarize(simulate(jobs, nodes, power=PowerConfig()), 0.0)
        kept = summarize(simulate(jobs, nodes, power=PowerConfig(budget_w=budget)), 0.0)
        assert kept["peak_budget_kw"] * 1000 <= budget + 1e-6 < free["peak_budget_kw"] * 1000
        assert kept["avg_jct_s"] > free["avg_jct_s"] and kept["completed"] == free["completed"] == 60


def test_budget_and_mix_input() -> None:
    nodes = uniform(2, 8, "H100")
    assert sim_power.parse_budget("10kW", nodes, {}) == 10000.0
    with pytest.raises(InvalidInput, match="idle node"):
        sim_power.parse_budget("500W", nodes, {})  # 8 idle H100s draw 560 W
    assert sim_power.parse_mix("max=1,efficient=3") == {"max": 0.25, "efficient": 0.75}
    assert sim_power.parse_mix("400w=1") == {"400W": 1.0}
    for bad in ("max", "turbo=1", "max=-1", "max=0"):
        with pytest.raises(InvalidInput):
            sim_power.parse_mix(bad)
    assert sim_power.parse_models("A100=50:400")["A100"] == sim_power.GpuPower(50, 400)
    with pytest.raises(InvalidInput):
        sim_power.parse_models("A100=400:50")


def test_hourly_and_timestamped_signals(tmp_path: Path) -> None:
    hourly = tmp_path / "carbon.csv"
    hourly.write_text("hour,gco2\n" + "".join(f"{h},{100 if 10 <= h < 16 else 400}\n" for h in range(24)))
    signal = parse_signal(str(hourly), "--carbon-intensity")
    assert signal is not None and signal.varies
    assert signal.at(11 * 3600) == 100 and signal.at(86400 + 3600) == 400  # each day alike
    assert signal.integral(9 * 3600, 11 * 3600) == pytest.approx(3600 * 400 + 3600 * 100)
    series = tmp_path / "price.csv"
    series.write_text("2017-10-01T00:00:00+00:00,0.3\n2017-10-01T06:00:00+00:00,0.1\n")
    price = parse_signal(str(series), "--energy-price")
    assert price is not None and price.at(price.times[1] + 1) == 0.1 and price.at(0) == 0.3
    assert parse_signal("0.2", "--energy-price") == Signal(constant=0.2)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("hour,value\n0,1,2\n", "line 2: expected 2 columns"),
        ("0,cheap\n", "line 1: 'cheap' is not a number"),
        ("0,1\n5,-3\n", "line 2: '-3' is not a number >= 0"),
        ("10,1\n5,1\n", "increasing order"),
        ("yesterday,1\n", "line 1: 'yesterday' is not an hour"),
        ("hour,value\n", "has no rows"),
    ],
)
def test_bad_signal_csv_is_one_line_and_exit_2(tmp_path: Path, content: str, message: str) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    with pytest.raises(InvalidInput, match=message):
        parse_signal(str(bad), "--carbon-intensity")
    if message == "increasing order":  # one through the command line
        path = trace(tmp_path, ["A,0,100,1,1,default"])
        out = subprocess.run(
            [*CLI, str(path), "--nodes", "1", "--carbon-intensity", str(bad)], capture_output=True, text=True
        )
        assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_deferrable_jobs_move_their_energy_to_cleaner_hours(tmp_path: Path) -> None:
    """Jobs submitted at midnight (hour 0 of a trace without dates) into dirty hours (400 g) may wait
    12 h: they start at 10:00, when it is clean (100 g), and the CO2 falls by three quarters at
    the price of 10 h in the queue."""
    carbon = tmp_path / "carbon.csv"
    carbon.write_text("".join(f"{h},{100 if 10 <= h < 16 else 400}\n" for h in range(24)))
    path = trace(tmp_path, [f"J{i},{i},3600,1,1,default" for i in range(4)])
    cli = [*CLI, str(path), "--nodes", "1", "--gpus-per-node", "4", "--gpu-model", "H100", "-o", "json"]
    out = subprocess.run(
        [*cli, "--carbon-intensity", str(carbon), "--deferrable-until", "12h"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout)
    deferred, plain = figures["default"], figures["default (no deferral)"]
    assert plain["job_co2_kg"] == pytest.approx(4 * 0.63 * 400 / 1000, rel=0.01)  # above 70 W idle
    assert deferred["job_co2_kg"] == pytest.approx(plain["job_co2_kg"] / 4, rel=0.01)
    assert deferred["deferral_co2_saved_kg"] == pytest.approx(plain["job_co2_kg"] * 3 / 4, rel=0.01)
    assert deferred["avg_queue_s"] == pytest.approx(10 * 3600, abs=10) and deferred["deferral_queue_cost_s"] > 0


def test_plan_under_a_budget_needs_at_least_as_many_nodes(tmp_path: Path) -> None:
    from gpupool.domain.nodes import Node
    from gpupool.scheduler import SchedulerConfig
    from gpupool.sim.plan import search

    rows = [f"J{i},{i * 30},{1800 + 300 * (i % 5)},{(1, 2, 4, 8)[i % 4]},1,default" for i in range(80)]
    jobs = load(trace(tmp_path, rows))

    def budget(cluster: list[Node]) -> PowerConfig:  # half of each probed cluster's peak
        return PowerConfig(budget_w=sim_power.parse_budget("50%", cluster, {}))

    free, _ = search(jobs, 600, 8, "H100", [], SchedulerConfig(), 64)
    kept, curve = search(jobs, 600, 8, "H100", [], SchedulerConfig(), 64, power=budget)
    assert free is not None and kept is not None and kept > free
    assert all(p.meets == (p.nodes >= kept) for p in curve if p.nodes in (kept, kept - 1))

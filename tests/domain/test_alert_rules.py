"""The alert rules and idle spells as pure functions: what is raised, kept, refreshed and cleared."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gpupool.domain.alerts import Alert, AlertKind, AlertRules, evaluate_gpus, evaluate_nodes
from gpupool.domain.idle import IdleSpell, job_idle_since, update_spells
from gpupool.domain.telemetry import GpuSample

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
RULES = AlertRules(temperature_c=85.0, temperature_clear_margin_c=5.0, xid_active_s=3600.0)


def reading(
    index: int = 0, *, at: float = 0.0, temp: float | None = 60.0, xid: int | None = 0, util: float | None = 50.0
) -> GpuSample:
    return GpuSample(
        "n1",
        index,
        f"GPU-{index}",
        T0 + timedelta(seconds=at),
        1000,
        80000,
        True,
        utilization_pct=util,
        temperature_c=temp,
        xid_errors=xid,
        last_xid=79 if xid else None,
    )


def stored(alert: Alert, id_: int = 1) -> Alert:
    return replace(alert, id=id_)


def test_a_hot_gpu_raises_once_stays_while_near_the_threshold_and_clears_below_the_margin() -> None:
    v = evaluate_gpus([], [reading(0, temp=86.0), reading(1, temp=84.9)], {("n1", 0): 7}, {}, T0, RULES)
    assert [(a.kind, a.gpu, a.job_id, a.value) for a in v.raised] == [(AlertKind.GPU_TEMPERATURE, 0, 7, 86.0)]
    assert "86 °C, over the 85 °C threshold" in v.raised[0].message and not v.cleared
    hot = stored(v.raised[0])
    assert evaluate_gpus([hot], [reading(0, temp=90.0)], {}, {}, T0, RULES).raised == []  # no second alert
    assert evaluate_gpus([hot], [reading(0, temp=81.0)], {}, {}, T0, RULES).cleared == []  # within the margin
    cleared = evaluate_gpus([hot], [reading(0, temp=79.5)], {}, {}, T0, RULES).cleared
    assert [c.alert.id for c in cleared] == [1] and "cooled to 80 °C" in cleared[0].message
    # A GPU that reports no temperature neither raises nor clears.
    assert evaluate_gpus([hot], [reading(0, temp=None)], {}, {}, T0, RULES) == evaluate_gpus(
        [hot], [], {}, {}, T0, RULES
    )


def test_only_new_xid_errors_raise_and_the_alert_clears_an_hour_after_the_latest() -> None:
    assert evaluate_gpus([], [reading(xid=2)], {}, {("n1", 0): 2.0}, T0, RULES).raised == []  # seen before
    v = evaluate_gpus([], [reading(xid=3)], {}, {("n1", 0): 2.0}, T0, RULES)
    assert [(a.kind, a.value) for a in v.raised] == [(AlertKind.GPU_XID, 3.0)]
    assert "1 new XID error(s) (latest XID 79)" in v.raised[0].message
    xid = stored(v.raised[0])

    later = evaluate_gpus([xid], [reading(xid=5, at=1800)], {}, {}, T0 + timedelta(seconds=1800), RULES)
    assert later.raised == [] and [(a.value, a.updated_at) for a in later.refreshed] == [
        (5.0, T0 + timedelta(seconds=1800))
    ]
    xid = later.refreshed[0]
    quiet = T0 + timedelta(seconds=1800 + 3599)
    assert evaluate_gpus([xid], [reading(xid=5)], {}, {}, quiet, RULES).cleared == []
    gone = evaluate_gpus([xid], [reading(xid=5)], {}, {}, quiet + timedelta(seconds=1), RULES)
    assert [c.alert.id for c in gone.cleared] == [1] and "no new XID error for 60 minutes" in gone.cleared[0].message


def test_a_probe_that_restarts_counting_from_zero_is_not_an_xid_storm() -> None:
    xid = stored(Alert(AlertKind.GPU_XID, "n1", 0, "x", T0, 4.0))
    v = evaluate_gpus([xid], [reading(xid=1, at=60)], {}, {}, T0 + timedelta(seconds=60), RULES)
    assert v.raised == [] and [(a.value, a.updated_at) for a in v.refreshed] == [(1.0, T0)]
    after = evaluate_gpus(v.refreshed, [reading(xid=2)], {}, {}, T0 + timedelta(seconds=120), RULES)
    assert [a.value for a in after.refreshed] == [2.0]  # a real new error after the restart counts


def test_node_down_alerts_follow_the_node_states() -> None:
    v = evaluate_nodes([], {"n2": "its Ray node died"}, T0)
    assert [(a.kind, a.node, a.gpu) for a in v.raised] == [(AlertKind.NODE_DOWN, "n2", None)]
    assert "node n2 is down: its Ray node died" in v.raised[0].message
    down = stored(v.raised[0])
    assert evaluate_nodes([down], {"n2": "still"}, T0).raised == []
    back = evaluate_nodes([down], {}, T0)
    assert [c.alert.node for c in back.cleared] == ["n2"] and back.raised == []


def test_idle_spells_start_at_the_first_low_reading_and_end_at_a_busy_or_unknown_one() -> None:
    holders = {("n1", 0): 7, ("n1", 1): 7}
    spells = update_spells({}, [reading(0, util=1.0), reading(1, util=30.0)], holders, 5.0)
    assert spells == {("n1", 0): IdleSpell(7, T0, 1.0)}
    assert job_idle_since(holders, spells) is None  # one GPU of the job works: the job is not idle
    spells = update_spells(spells, [reading(0, util=0.0, at=5), reading(1, util=0.0, at=5)], holders, 5.0)
    assert spells == {("n1", 0): IdleSpell(7, T0, 0.0), ("n1", 1): IdleSpell(7, T0 + timedelta(seconds=5), 0.0)}
    assert job_idle_since(holders, spells) == T0 + timedelta(seconds=5)
    assert update_spells(spells, [], holders, 5.0) == spells  # a missed reading is not a busy one
    unknown = update_spells(spells, [reading(0, util=None, at=10)], holders, 5.0)
    assert set(unknown) == {("n1", 1)}  # MIG reports no utilisation: never counted idle
    handed_on = update_spells(spells, [], {("n1", 0): 8}, 5.0)
    assert handed_on == {}  # another job holds GPU 0 now, and nobody GPU 1

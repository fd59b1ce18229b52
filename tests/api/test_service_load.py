"""The head's view of the gateway's load reports (usecases/load.py): histogram quantiles, recent
figures per replica and service, counters for /metrics, old reports without latency; and the CLI
drawing those figures (cli/service_load.py), from the API's JSON of a LoadBoard fed with reports."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console

from gpupool.api.schemas.services import LoadOut, ServiceLoadOut, StatsIn
from gpupool.cli.service_load import replica_table, services_table
from gpupool.usecases.load import LoadBoard, ReplicaLoad, quantile

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BOUNDS = (0.01, 0.025, 0.05)


@pytest.mark.parametrize(
    ("counts", "q", "expected"),
    [
        ([0, 0, 0, 0], 0.5, None),  # nothing observed
        ([10, 0, 0, 0], 0.5, 0.005),  # inside the first bucket, from 0
        ([0, 40, 0, 0], 0.5, 0.0175),
        ([0, 40, 0, 0], 0.99, 0.02485),
        ([50, 0, 50, 0], 0.5, 0.01),  # the rank ends the first bucket
        ([0, 0, 0, 5], 0.99, 0.05),  # past every bound: the last bound
        ([1, 2], 0.5, None),  # counts that do not fit the bounds
    ],
)
def test_quantile(counts: list[int], q: float, expected: float | None) -> None:
    got = quantile(BOUNDS, counts, q)
    assert got == (None if expected is None else pytest.approx(expected))


def line(replica: str, requests: int, in_flight: int = 0, counts: tuple[int, ...] = ()) -> ReplicaLoad:
    return ReplicaLoad("web", replica, in_flight, 1, requests, 1, counts, 0.02 * sum(counts))


def test_figures_are_rates_over_recent_reports_and_the_newest_in_flight() -> None:
    board = LoadBoard()
    board.record(T0 - timedelta(seconds=100), 2.0, [line("1", 999)], BOUNDS)  # older than the span
    board.record(T0, 2.0, [line("1", 30, 5, (0, 30, 0, 0)), line("2", 10, 1)], BOUNDS)
    board.record(T0 + timedelta(seconds=2), 2.0, [line("1", 10, 2, (0, 10, 0, 0))], BOUNDS)
    load = board.figures("web", T0 + timedelta(seconds=3))
    assert load is not None and (load.window_s, load.age_s) == (4.0, 1.0)
    one, two = load.replicas["1"], load.replicas["2"]
    assert (one.requests_per_s, one.errors_per_s, one.in_flight, one.queued) == (10.0, 0.5, 2, 1)
    assert one.latency_p50_s == pytest.approx(0.0175)
    assert (two.requests_per_s, two.in_flight, two.latency_p50_s) == (2.5, 0, None)  # not in the newest report
    assert (load.total.requests_per_s, load.total.in_flight, load.total.queued) == (12.5, 2, 1)
    stale = board.figures("web", T0 + timedelta(seconds=20))
    assert stale is not None and (stale.total.in_flight, stale.total.queued) == (0, 0)
    assert board.figures("web", T0 + timedelta(seconds=60)) is None
    assert board.figures("other", T0) is None


def test_totals_count_since_start_and_forget_replaced_replicas() -> None:
    board = LoadBoard()
    board.record(T0, 1.0, [line("1", 3, counts=(1, 2, 0, 0)), line("2", 4)], BOUNDS)
    board.record(T0, 1.0, [line("1", 5, counts=(0, 5, 0, 0))], BOUNDS)
    ((service, replica, t),) = board.totals()
    assert (service, replica, t.requests, t.errors, t.counts, t.bounds) == ("web", "1", 8, 2, [1, 7, 0, 0], BOUNDS)
    board.record(T0, 1.0, [line("1", 1, counts=(1, 0))], (0.5,))  # other buckets: a fresh histogram
    ((_, _, t),) = board.totals()
    assert (t.requests, t.counts, t.bounds) == (9, [1, 0], (0.5,))
    board.keep_only([])
    assert board.totals() == [] and board.figures("web", T0) is None


def test_an_old_report_without_latency_is_valid_and_a_bad_one_is_refused() -> None:
    old = StatsIn.model_validate(
        {
            "window_s": 1,
            "replicas": [{"service": "web", "replica": "1", "in_flight": 0, "queued": 0, "requests": 2, "errors": 0}],
        }
    )
    assert old.replicas[0].line().latency_counts == ()
    board = LoadBoard()
    board.record(T0, 1.0, [r.line() for r in old.replicas], old.latency_bounds or ())
    load = board.figures("web", T0)
    assert load is not None and load.total.requests_per_s == 2.0 and load.total.latency_p99_s is None
    for bounds in ([0.1, 0.05], [0.0], [0.1, 0.1]):
        with pytest.raises(ValueError, match="ascending"):
            StatsIn.model_validate({"window_s": 1, "latency_bounds": bounds, "replicas": []})


def render(renderable: object, width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_the_cli_draws_the_figures_of_a_fed_board() -> None:
    board = LoadBoard()
    board.record(T0, 2.0, [line("7", 40, 3, (0, 40, 0, 0))], BOUNDS)
    load = board.figures("web", T0)
    assert load is not None
    replica = {"job_id": 7, "state": "running", "ready": True, "current": True, "stopping": False}
    replica |= {
        "node": "node-1",
        "host": "127.0.0.1",
        "port": 4000,
        "load": LoadOut.of(load.replicas["7"]).model_dump(),
    }
    quiet = {**replica, "job_id": 8, "load": None}
    service = {"name": "web", "project": "default", "state": "ready", "replicas": {"ready": 2, "desired": 2}}
    service |= {"replica_list": [replica, quiet], "load": ServiceLoadOut.of_service(load).model_dump()}
    for width in (80, 160):
        text = render(replica_table(service), width)
        row7 = next(r for r in text.splitlines() if r.lstrip().startswith("7 "))
        cells = row7.split()
        at = cells.index("20.0")  # requests a second, then in flight (the newest report's), p50, p99
        assert cells[at + 1] == "3" and cells.index("18ms") > at and cells.index("25ms") > at, text
        row8 = next(r for r in text.splitlines() if r.lstrip().startswith("8 "))
        assert row8.count("-") >= 4, text
        listing = render(services_table([service]), width)
        assert "2/2" in listing and "20.0" in listing and "18ms" in listing, listing

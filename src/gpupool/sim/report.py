"""A report directory for people comparing scheduling policies on one trace: per-job rows to dig
into with any tool, the summary figures, and plots of queue length, GPU allocation and wait times.

numpy and matplotlib are imported inside the functions that draw, so that ``import gpupool`` and
the other commands do not pay for them.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpupool.sim.engine import JobRun, SimResult
from gpupool.sim.plan import Probe

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from numpy.typing import NDArray

    Floats = NDArray[np.float64]

MAX_POINTS = 2000  # per line: beyond this a plot takes longer to draw and shows nothing more
JOB_COLUMNS = (
    "policy",
    "job_id",
    "project",
    "gpus",
    "workers",
    "submit_s",
    "first_start_s",
    "finish_s",
    "queue_s",
    "jct_s",
    "preemptions",
)
MIN_LOG_S = 1.0  # a log axis cannot show 0 s: shorter times are drawn here
TIME_TICKS = (
    (1, "1 s"),
    (10, "10 s"),
    (60, "1 min"),
    (600, "10 min"),
    (3600, "1 h"),
    (36000, "10 h"),
    (86400, "1 d"),
    (864000, "10 d"),
    (8640000, "100 d"),
)


def write_report(
    directory: Path, results: Mapping[str, SimResult], figures: Mapping[str, dict[str, Any]]
) -> list[Path]:
    """Write the report into ``directory`` (created); keys are policy names, ``figures`` each
    policy's ``summarize()`` output. Returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    jobs = directory / "jobs.csv"
    _write_csv(jobs, JOB_COLUMNS, (_job_row(p, run) for p, r in results.items() for run in r.runs.values()))
    placed = directory / "placed.csv"
    _write_csv(placed, ("policy", "job_id"), ([p, job_id] for p, r in results.items() for job_id in _placed(r)))
    summary = directory / "summary.json"
    # the placed list is as long as the trace: it has its own file, not to bury the figures
    trimmed = {p: {k: v for k, v in f.items() if k != "placed"} for p, f in figures.items()}
    summary.write_text(json.dumps(trimmed, indent=2) + "\n")
    return [jobs, placed, summary, *_plot(directory, results)]


def _job_row(policy: str, run: JobRun) -> list[str]:
    """Empty cells, not 0, where a job never started or finished: 0 would read as a real time."""
    t = run.trace
    queue = None if run.first_start is None else run.first_start - t.submit_time
    jct = None if run.finish is None else run.finish - t.submit_time
    times = (t.submit_time, run.first_start, run.finish, queue, jct)
    spec = (t.spec.project, _num(t.spec.gpus), t.spec.workers_text)  # 2:8 for an elastic job
    return [policy, t.job_id, *spec, *map(_num, times), str(run.preemptions)]


def _num(x: float | None) -> str:
    """Whole numbers without ``.0`` and the rest exact (``repr``): ``%g`` would round seconds."""
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _placed(result: SimResult) -> list[str]:
    return sorted(r.trace.job_id for r in result.runs.values() if r.first_start is not None)


def _write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")  # not CRLF: for awk, grep and diff
        writer.writerow(header)
        writer.writerows(rows)


def _plot(directory: Path, results: Mapping[str, SimResult]) -> list[Path]:
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    queue, used = _new_figure(1), _new_figure(1)
    binned = False
    for policy, result in results.items():
        if not result.timeline:
            continue
        t, held, waiting = np.asarray(result.timeline, dtype=np.float64).T
        share = held * (100.0 / result.capacity) if result.capacity else held * 0.0
        for fig, values, how in ((queue, waiting, "max"), (used, share, "mean")):
            x, y = _downsample(t, values, how)
            fig.axes[0].plot(x / 3600.0, y, drawstyle="steps-post", label=policy)
        binned = binned or len(t) > MAX_POINTS
    queue.axes[0].yaxis.set_major_locator(MaxNLocator(integer=True))  # no 1.25 jobs
    _label(queue.axes[0], "Jobs waiting in the queue" + (" (highest per time bin)" if binned else ""), "jobs")
    _label(used.axes[0], "GPUs allocated" + (" (mean per time bin)" if binned else ""), "% of the cluster's GPUs")
    used.axes[0].set_ylim(0, 105)

    waits = _new_figure(2)
    for ax, to_finish in zip(waits.axes, (True, False), strict=True):
        curves = {p: _cdf(_durations(r, to_finish), len(r.runs)) for p, r in results.items()}
        for policy, (x, y) in curves.items():
            if len(x):
                ax.plot(x, y, drawstyle="steps-post", label=policy)
        title = "Job completion time" if to_finish else "Time waiting to start"
        _time_axis(ax, title, [x for x, _ in curves.values() if len(x)])
    waits.axes[0].set_ylabel("fraction of all jobs (cumulative)")
    waits.suptitle("Distribution over jobs: a line levelling off below 1 means jobs that never finished / started")

    paths = []
    for fig, name in ((queue, "queue_length.png"), (used, "gpu_utilization.png"), (waits, "jct_cdf.png")):
        paths.append(directory / name)
        fig.savefig(paths[-1])
    return paths


def _new_figure(columns: int) -> Figure:
    """A figure on its own Agg canvas: no pyplot, so no global state and no GUI backend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9 if columns == 1 else 12, 4.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    fig.subplots(1, columns, squeeze=False)
    return fig


def _label(ax: Axes, title: str, ylabel: str) -> None:
    ax.set_title(title)
    ax.set_xlabel("time since the first submission (hours)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(title="policy")


def _downsample(t: Floats, v: Floats, how: str) -> tuple[Floats, Floats]:
    """A step series cut to ``MAX_POINTS`` equal time bins. Queue length keeps each bin's
    maximum, so a short burst stays visible on a year-long trace; allocation keeps the
    time-weighted mean, so the area under the line is still the GPU-time used."""
    import numpy as np

    if len(t) <= MAX_POINTS or t[-1] <= t[0]:
        return t, v
    edges = np.linspace(t[0], t[-1], MAX_POINTS + 1)
    if how == "mean":
        area = np.concatenate(([0.0], np.cumsum(v[:-1] * np.diff(t))))  # exact at events, linear between
        y = np.diff(np.interp(edges, t, area)) / np.diff(edges)
    else:
        y = v[np.searchsorted(t, edges[:-1], side="right") - 1]  # the value each bin opens with
        inside = np.minimum(np.searchsorted(edges, t, side="right") - 1, MAX_POINTS - 1)
        np.maximum.at(y, inside, v)  # and every value set during it
    return edges, np.append(y, y[-1])  # the last edge closes the last step


def _durations(result: SimResult, to_finish: bool) -> list[float]:
    """Seconds from submission to finish (completion time) or to first start (queueing)."""
    ends = ((r.finish if to_finish else r.first_start, r.trace.submit_time) for r in result.runs.values())
    return [end - submit for end, submit in ends if end is not None]


def _cdf(values: list[float], total: int) -> tuple[Floats, Floats]:
    """Steps of ``1 / total``, all jobs of the trace: a policy that leaves jobs waiting levels
    off below 1 instead of looking as good as one that ran them all."""
    import numpy as np

    if not values:
        return np.empty(0), np.empty(0)
    x = np.maximum(np.sort(np.asarray(values, dtype=np.float64)), MIN_LOG_S)
    y = np.arange(1, len(x) + 1, dtype=np.float64) / total
    if len(x) > MAX_POINTS:
        keep = np.unique(np.linspace(0, len(x) - 1, MAX_POINTS).astype(np.int64))
        x, y = x[keep], y[keep]
    return np.insert(x, 0, x[:1]), np.insert(y, 0, 0.0)  # the rise from 0 at the first value


def _time_axis(ax: Axes, title: str, xs: list[Floats]) -> None:
    """Log scale labelled in s/min/h/d, widened to the nearest labels so that at least two show."""
    ax.set_title(title)
    ax.set_xlabel(f"time from submission (log scale; under {MIN_LOG_S:g} s drawn at {MIN_LOG_S:g} s)")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    if not xs:  # a log axis with no data warns: say it in words instead
        ax.text(0.5, 0.5, "no job got this far", ha="center", va="center", transform=ax.transAxes)
        return
    lo, hi = min(float(x[0]) for x in xs), max(float(x[-1]) for x in xs) * 1.05
    ticks = [s for s, _ in TIME_TICKS]
    left = max([s for s in ticks if s <= lo], default=ticks[0])
    right = max(min([s for s in ticks if s >= hi], default=ticks[-1]), hi)
    ax.set_xscale("log")
    ax.set_xticks(ticks, [label for _, label in TIME_TICKS])
    ax.set_xlim(left, right)  # after set_xticks, which widens the limits to every tick
    ax.minorticks_off()
    ax.legend(title="policy", loc="lower right")


def write_curve(directory: Path, curve: Sequence[Probe], target_s: float) -> list[Path]:
    """``gpupool plan``'s measurements: ``curve.csv`` and ``curve.png`` (p95 queue time by size,
    the target as a line; probes that stopped early are drawn at the top as misses)."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = [[str(p.nodes), str(p.gpus), "" if p.stopped_early else _num(p.p95_queue_s), str(p.meets)] for p in curve]
    _write_csv(directory / "curve.csv", ("nodes", "gpus", "p95_queue_s", "meets"), rows)
    fig = _new_figure(1)
    ax = fig.axes[0]
    finite = [p.p95_queue_s for p in curve if not p.stopped_early and p.p95_queue_s != float("inf")]
    top = max([target_s * 2, *finite]) / 3600.0
    ax.plot([p.nodes for p in curve], [min(p.p95_queue_s / 3600.0, top) for p in curve], marker="o", label="p95")
    ax.axhline(target_s / 3600.0, color="grey", linestyle="--", label="target")
    ax.set_title("p95 time waiting to start, by cluster size (capped: stopped early)")
    ax.set_xlabel("nodes")
    ax.set_ylabel("hours")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(directory / "curve.png")
    return [directory / "curve.csv", directory / "curve.png"]

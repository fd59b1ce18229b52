"""Renderings of jobs and nodes for people: ``Listing``, ``Grid`` and ``Styled`` text, which
``cli/textout.py`` prints without Rich (and Rich prints where it cannot)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpupool.cli.styled import Grid, Styled
from gpupool.cli.tables import Col, Listing
from gpupool.domain import exit_reasons
from gpupool.domain.jobs import JobState
from gpupool.domain.nodes import NodeState
from gpupool.domain.option_text import bounded_duration as bounded_duration  # for the commands
from gpupool.domain.option_text import span as span

J, N = JobState, NodeState
# Keyed by the enums, looked up by the API's strings: a StrEnum member hashes as its value.
STATE_STYLE: dict[str, str] = {
    J.PENDING: "yellow",
    J.STARTING: "cyan",
    J.RUNNING: "green",
    J.SUCCEEDED: "bold green",
    J.FAILED: "bold red",
    J.CANCELLED: "magenta",
    J.PREEMPTED: "yellow",
    J.LOST: "red",
    N.DRAINING: "yellow",
    N.DRAINED: "magenta",
    N.DOWN: "red",
}


def ago(iso: str | None, now: datetime | None = None) -> str:
    """How long ago an ISO time was, for people: 42s, 5m, 2h05m, 3d."""
    if not iso:
        return "-"
    return span(int(((now or datetime.now(UTC)) - parse_time(iso)).total_seconds()))


def until(iso: str, now: datetime | None = None) -> str:
    """How long until an ISO time, for people."""
    return span(int((parse_time(iso) - (now or datetime.now(UTC))).total_seconds()))


def parse_time(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def workers_text(job: dict[str, Any]) -> str:
    """``4`` for a gang; ``3/2:8`` for an elastic job running on 3 of its 2 to 8 workers (issue 35)."""
    most = job.get("max_workers")
    if not most:
        return str(job["workers"])
    return f"{len(job['placements'])}/{job['workers']}:{most}"


def gpus_text(job: dict[str, Any]) -> str:
    gpus = f"{job['gpus']:g}"
    return f"{workers_text(job)}×{gpus}" if job["workers"] > 1 or job.get("max_workers") else gpus


def placement_text(job: dict[str, Any]) -> str:
    parts = []
    for p in job["placements"]:
        gpus = ",".join(map(str, p["gpus"])) or "-"
        parts.append(f"{p['node']}:{gpus}")
    return " ".join(parts)


def state_text(state: str) -> Styled:
    return Styled(state, style=STATE_STYLE.get(state, ""))


def jobs_table(jobs: list[dict[str, Any]]) -> Listing:
    return rows_table([job_row(j) for j in jobs])


JOB_COLUMNS = (
    Col("ID"),
    Col("NAME", wrap=True),
    Col("PROJECT", drop=1),
    Col("STATE", wrap=True),  # an array's is its counts: 3 pending 2 running
    Col("GPUS"),
    Col("WHERE / WHY", wrap=True),  # the one that takes what room is left
    Col("AGE", justify="right", drop=2),
)


def rows_table(rows: list[tuple[Any, ...]]) -> Listing:
    """The table of ``gpupool jobs``: rows of jobs (``job_row``) and of arrays."""
    return Listing(JOB_COLUMNS, rows)


def job_row(j: dict[str, Any]) -> tuple[Any, ...]:
    where = placement_text(j) if j["placements"] and j["state"] in (J.STARTING, J.RUNNING) else (j["reason"] or "")
    if j["state"] in (J.SUCCEEDED, J.FAILED, J.CANCELLED):
        where = f"exit {j['exit_code']}" if j["exit_code"] is not None else ""
    ident = str(j["id"]) if j.get("array_id") is None else f"{j['array_id']}_{j['array_index']}"
    return (ident, j["name"], j["project"], state_text(j["state"]), gpus_text(j), where, ago(j["submitted_at"]))


NODE_COLUMNS = (
    Col("NODE"),
    Col("STATE", wrap=True),
    Col("GPUS FREE", justify="right"),
    Col("MODEL", wrap=True),
    Col("GPU → JOBS", wrap=True),
    Col("CPUS", justify="right", drop=2),
    Col("MEMORY", justify="right", drop=1),
)


def nodes_table(nodes: list[dict[str, Any]]) -> Listing:
    table = Listing(NODE_COLUMNS)
    for n in nodes:
        models = sorted({g["model"] for g in n["gpus"]}) or ["-"]
        use = " ".join(_gpu_use(g) for g in n["gpus"]) or "-"
        model = ", ".join(models) + (" (simulated)" if n["simulated"] else "")
        state = state_text(n["state"]) if n["state"] != N.UP else Styled(N.UP.value, style="green")
        if n.get("drain_requested") and n["state"] == N.DOWN:
            state.append(" (drained when back)")
        table.add_row(
            n["name"],
            state,
            f"{n['gpus_free']}/{n['gpus_total']}",
            model,
            use,
            str(n["cpus"]),
            f"{n['memory_mib'] // 1024}G",
        )
    return table


def _gpu_use(gpu: dict[str, Any]) -> str:
    """``index:jobs``, and why a GPU is out of service: disabled by an admin, or unhealthy."""
    use = f"{gpu['index']}:{','.join(map(str, gpu['jobs'])) or '·'}"
    if gpu.get("disabled"):
        return use + "(disabled)"
    return use if gpu.get("healthy", True) else use + "(unhealthy)"


HIDDEN = "(hidden: only its owner, a manager of its project or an admin sees what runs inside a job)"


def job_detail(job: dict[str, Any]) -> Grid:
    table = Grid()
    rows: list[tuple[str, Any]] = [
        ("job", f"{job['id']} ({job['name']})"),
        ("state", state_text(job["state"])),
        ("project", job["project"]),
        ("owner", job["owner"]),
        ("priority", job["priority"]),
        ("command", HIDDEN if job["command"] is None else " ".join(job["command"]) or "(the image's own)"),
        *([("image", _image(job))] if job.get("image") else []),
        (
            "resources",
            f"{workers_text(job)} worker(s) × {job['gpus']:g} GPU, {job['cpus']:g} CPUs, "
            f"{job['memory_mib']} MiB memory" + (f", model {job['gpu_model']}" if job["gpu_model"] else ""),
        ),
        *([("gpu power", job.get("gpu_power") or "the project's default (max unless set)")] if job["gpus"] else []),
        ("placements", placement_text(job) or "-"),
        *([("in use", usage_text(job))] if job.get("usage") else []),
        *([("runs as", job["run_as"])] if job.get("run_as") else []),
        *([("checkpoint dir", job["checkpoint_dir"])] if job.get("checkpoint_dir") else []),
        *([("url", _published(job))] if job.get("expose") else []),
        ("restarts", f"{job['restarts']} of {job['max_restarts']} (starts: {job['starts']})"),
        ("exit code", _exit(job)),
        ("submitted", job["submitted_at"]),
        ("started", job["started_at"] or "-"),
        ("finished", job["finished_at"] or "-"),
    ]
    if job["state"] == J.PENDING:
        rows.insert(2, ("reason", f"[{job['reason_code']}] {job['reason']}"))
    for key, value in rows:
        table.add_row(key, value)
    return table


def _image(job: dict[str, Any]) -> str:
    """The image as asked for, and the digest its last attempt ran once a node reported it."""
    digest = job.get("image_digest")
    return f"{job['image']} ({digest[:19]})" if digest else str(job["image"])


def _published(job: dict[str, Any]) -> str:
    """Where the gateway serves the job's --expose port (authenticated: gpupool login's token)."""
    where = job.get("url") or "(the head runs no gateway)"
    return f"{where} (port {job['expose']} of worker 0, once it runs; send Authorization: Bearer <token>)"


def usage_text(job: dict[str, Any]) -> str:
    """Each running worker's memory and CPU from its cgroup, against what it asked for."""
    limit = f" of {job['memory_mib']}" if job["memory_mib"] else ""
    parts = []
    for u in job["usage"]:
        memory = "-" if u["memory_mib"] is None else f"{u['memory_mib']}{limit} MiB (peak {u['memory_peak_mib']})"
        cpu = "-" if u["cpu_pct"] is None else f"{u['cpu_pct']:g}%"
        parts.append(f"worker {u['worker']}: memory {memory}, CPU {cpu}")
    return "; ".join(parts)


def _exit(job: dict[str, Any]) -> str:
    return exit_reasons.explain(job["exit_code"], job.get("exit_reason"))


def events_table(events: list[dict[str, Any]]) -> Listing:
    table = Listing((Col("TIME"), Col("EVENT"), Col("MESSAGE", wrap=True)), title="events")
    for e in events:
        table.add_row(e["time"].replace("T", " ")[:19], e["kind"], e["message"])
    return table

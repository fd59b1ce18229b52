"""Simulated clusters and project files for ``gpupool simulate``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from gpupool.domain import tree
from gpupool.domain.errors import GpupoolError, InvalidInput
from gpupool.domain.model_quotas import parse_figures, unknown_models
from gpupool.domain.nodes import GpuInfo, Node, NodeState
from gpupool.domain.projects import Project
from gpupool.sim.trace import read_rows

DEFAULT_CPUS = 64
DEFAULT_MEMORY_MIB = 512 * 1024
DEFAULT_GPU_MEMORY_MIB = 81920


def uniform(nodes: int, gpus_per_node: int, gpu_model: str = "GPU") -> list[Node]:
    if nodes < 1 or gpus_per_node < 0:
        raise InvalidInput("--nodes must be >= 1 and --gpus-per-node >= 0")
    return [_node(f"node-{i + 1}", gpus_per_node, gpu_model, DEFAULT_CPUS, DEFAULT_MEMORY_MIB) for i in range(nodes)]


def load_cluster(path: Path) -> list[Node]:
    """gpupool's ``name,gpus,gpu_model[,cpus,memory_mib]``, or the Alibaba openb node list
    (``sn,cpu_milli,memory_mib,gpu,model``)."""
    rows = read_rows(path, "cluster file")
    nodes = []
    for line, row in enumerate(rows, start=2):
        try:
            if "sn" in row:
                nodes.append(
                    _node(
                        row["sn"],
                        int(row["gpu"]),
                        row.get("model") or "GPU",
                        max(1, int(row["cpu_milli"]) // 1000),
                        int(row["memory_mib"]),
                    )
                )
            else:
                nodes.append(
                    _node(
                        row["name"],
                        int(row["gpus"]),
                        row.get("gpu_model") or "GPU",
                        int(row.get("cpus") or DEFAULT_CPUS),
                        int(row.get("memory_mib") or DEFAULT_MEMORY_MIB),
                    )
                )
        except (KeyError, ValueError) as exc:
            raise InvalidInput(
                f"{path}:{line}: not a node row ({exc}); use name,gpus,gpu_model[,cpus,memory_mib]"
            ) from None
    if not nodes:
        raise InvalidInput(f"{path}: no nodes")
    return nodes


PROJECT_COLUMNS = "name,quota[,limit,weight,user_limit,parent,quota_by_model,limit_by_model,lend_limit]"


def load_projects(path: Path, gpus_per_node: int = 8, models: Iterable[str] | None = None) -> list[Project]:
    """``PROJECT_COLUMNS``, or the Helios/Lucid virtual-cluster sizes (``vc,node num``): each VC
    becomes project ``vc-<hash>`` (the Philly loader's names) with ``node num`` whole nodes of quota.
    ``parent`` (issue 34) puts a project under a unit, a row of the same file, so
    that a trace can be replayed under an organisation before it is set up; the tree is checked
    as ``gpupool project set --parent`` checks it (no cycle, no missing unit, children's quotas
    within their unit's). ``quota_by_model``/``limit_by_model`` hold ``--quota``'s MODEL=N pairs
    with semicolons (``H100=8;A100=16``: a comma would end the cell), ``lend_limit`` is
    ``--lend-limit``'s; all checked by ``Project.create`` as ``gpupool project set`` checks them.
    A blank ``quota`` with per-model quotas is their sum, as ``--quota H100=8,A100=16`` is.
    ``models``: the GPU models of the replayed cluster; a per-model figure for any other is
    refused, as ``gpupool project set`` refuses one for a model no node has (it would never bind)."""
    rows = read_rows(path, "projects file")
    projects = []
    for line, row in enumerate(rows, start=2):
        try:
            if "vc" in row and "node num" in row:
                projects.append(
                    Project.create(
                        f"vc-{row['vc']}", float(int(row["node num"]) * gpus_per_node), parent=row.get("parent") or None
                    )
                )
                continue
            limit, per_user = row.get("limit") or None, row.get("user_limit") or None  # (user_limit: issue 34)
            lends, quotas = row.get("lend_limit") or None, _per_model(row, "quota_by_model")
            projects.append(
                Project.create(
                    row["name"],
                    sum(quotas.values()) if quotas and not (row["quota"] or "").strip() else float(row["quota"]),
                    float(limit) if limit else None,
                    float(row.get("weight") or 1.0),
                    user_limit=float(per_user) if per_user else None,
                    parent=row.get("parent") or None,
                    lend_limit=float(lends) if lends else None,
                    quota_by_model=quotas,
                    limit_by_model=_per_model(row, "limit_by_model"),
                )
            )
        except (KeyError, ValueError, TypeError, GpupoolError) as exc:
            said = str(exc).removeprefix("--")  # parse_figures names the CLI option; here it is a column
            raise InvalidInput(f"{path}:{line}: not a project row ({said}); use {PROJECT_COLUMNS}") from None
    here = None if models is None else sorted(set(models))
    for line, project in enumerate(projects if here is not None else [], start=2):  # one project a row
        named = project.quota_by_model.keys() | project.limit_by_model.keys()
        if named and (refusal := unknown_models(named, here or [])):
            raise InvalidInput(f"{path}:{line}: project {project.name}: {refusal}")
    for project in projects:
        try:
            tree.validate(project, projects)
        except GpupoolError as exc:
            raise InvalidInput(f"{path}: {exc}") from None
    return projects


def write_projects(path: Path, projects: Iterable[Project]) -> None:
    """``projects`` as a projects file ``load_projects`` reads back (``gpupool plan --quotas
    --write-projects``): every column of ``PROJECT_COLUMNS``, blank where unset."""

    def cell(value: float | None) -> str:
        return "" if value is None else f"{value:g}"

    def pairs(figures: Mapping[str, float]) -> str:
        return ";".join(f"{m}={v:g}" for m, v in sorted(figures.items()))

    lines = [PROJECT_COLUMNS.replace("[", "").replace("]", "")]
    for p in projects:
        own = [p.name, cell(p.quota), cell(p.limit), cell(p.weight), cell(p.user_limit), p.parent or ""]
        lines.append(",".join([*own, pairs(p.quota_by_model), pairs(p.limit_by_model), cell(p.lend_limit)]))
    path.write_text("\n".join(lines) + "\n")


def _per_model(row: dict[str, str], column: str) -> dict[str, float]:
    """A ``quota_by_model``/``limit_by_model`` cell: ``H100=8;A100=16``, pairs only (the total has its own column)."""
    cell = (row.get(column) or "").strip()
    if not cell:
        return {}
    total, figures = parse_figures(column, cell, sep=";")
    if total is not None:
        raise InvalidInput(f"{column} {cell!r}: MODEL=N pairs only, as H100=8;A100=16 (a total goes in its own column)")
    return figures


def check_leaves(projects: Iterable[Project], job_projects: Iterable[str]) -> None:
    """Refuse a trace whose jobs name a unit (a project with children): jobs go to leaves only."""
    units = {p.parent for p in projects if p.parent is not None}
    named = sorted(units & set(job_projects))
    if named:
        raise InvalidInput(
            f"the trace submits jobs to {', '.join(named)}, which the projects file makes a unit"
            " (a project with children): jobs go to the projects below it"
        )


def _node(name: str, gpus: int, model: str, cpus: int, memory_mib: int) -> Node:
    return Node(
        name=name,
        state=NodeState.UP,
        address="sim",
        gpus=tuple(GpuInfo(i, f"GPU-sim-{name}-{i}", model, DEFAULT_GPU_MEMORY_MIB, True) for i in range(gpus)),
        cpus=cpus,
        memory_mib=memory_mib,
    )

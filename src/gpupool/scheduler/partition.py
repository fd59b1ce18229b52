"""Partitions: which nodes each project owns when a policy confines projects to their own nodes.

Philly's virtual clusters and Slurm's partitions give a team machines, not a count of GPUs
anywhere: a job of one team never lands on another's node, so a team's queue is shaped by its
own nodes' fragmentation. ``partition="gpus"`` keeps the milder reading (the quota in GPUs on any
node); ``partition="nodes"`` assigns whole nodes with ``assign``.

The assignment is a pure function of the snapshot's nodes and the configured quotas, so every
cycle (and the simulator, and ``why``'s estimate) finds the same one and jobs never need to move:

- nodes in name order, all of them (down and drained ones too: a node that goes down and comes
  back is still its project's, and nothing shifts while it is away);
- leaf projects with a quota (a unit, a project that others have as parent, takes no nodes of its
  own: no job is submitted to it, and its quota is its projects' already), largest first (then by
  name), each take the next GPU nodes until the
  GPUs they hold cover the quota: a quota is rounded up to whole nodes (12 GPUs on 8-GPU nodes
  is two nodes, 16 GPUs);
- quotas that exceed the cluster: the projects served last (the smallest quotas) get fewer nodes
  than their quota, or none, and their jobs wait with a reason saying so;
- leftovers (nodes no quota claims, GPU-less ones included) go to ``default``, which
  ``effective_projects`` already grants the GPUs no quota claims;
- a node that joins sorts into the order; names that sort last (``node-9`` after ``node-8``)
  only change the leftovers, others may shift later nodes to the next project. Running jobs
  stay where they are either way (nothing migrates); only new starts follow the new sets.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from gpupool.domain.nodes import Node
from gpupool.domain.projects import DEFAULT_PROJECT, Project

Partitions = dict[str, frozenset[str]]


def assign(nodes: Iterable[Node], projects: Iterable[Project]) -> Partitions:
    """Each project's nodes (see the module docstring); every node is in exactly one set."""
    ordered = sorted(nodes, key=lambda n: n.name)
    gpu_nodes = iter([n for n in ordered if n.gpus])
    taken: set[str] = set()
    sets: dict[str, set[str]] = {}
    listed = list(projects)
    units = {p.parent for p in listed if p.parent is not None}
    leaves = (p for p in listed if p.quota > 0 and p.name not in units)
    for project in sorted(leaves, key=lambda p: (-p.quota, p.name)):
        mine = sets.setdefault(project.name, set())
        held = 0
        while held < project.quota - 1e-9:
            node = next(gpu_nodes, None)
            if node is None:
                break
            mine.add(node.name)
            taken.add(node.name)
            held += len(node.gpus)
    sets.setdefault(DEFAULT_PROJECT, set()).update(n.name for n in ordered if n.name not in taken)
    return {name: frozenset(members) for name, members in sets.items()}


def owned_gpus(nodes: Iterable[Node], sets: Partitions) -> dict[str, int]:
    """GPUs on each project's nodes, down ones included: what its jobs may ever ask for."""
    gpus = {n.name: len(n.gpus) for n in nodes}
    return {project: sum(gpus.get(name, 0) for name in members) for project, members in sets.items()}


def describe(project: str, members: frozenset[str], gpus: int) -> str:
    """``project a's 2 nodes (16 GPUs: n1, n2)``: what a waiting job's reason names."""
    if not members:
        return f"project {project} owns no nodes (the quotas exceed the cluster, or it has no quota)"
    shown = ", ".join(sorted(members)[:4]) + (", …" if len(members) > 4 else "")
    count = len(members)
    return f"project {project}'s {count} node{'' if count == 1 else 's'} ({gpus} GPUs: {shown})"


def model_caps(project: Project, models: Iterable[str]) -> dict[str, float]:
    """What the isolated policy confines ``project`` to on each model (issue 34 item 2): a
    per-model quota is its bound on that model, and the rest of its total quota the bound on each
    model it names none for (with no total, that rest is 0: ``--quota H100=2`` confines it to two
    H100s). Empty for a project with no per-model quota: its total quota alone confines it."""
    if not project.quota_by_model:
        return {}
    rest = max(0.0, project.quota - sum(project.quota_by_model.values()))
    return {m: project.quota_by_model.get(m, rest) for m in sorted(models)}


def confined(projects: Iterable[Project], models: Iterable[str]) -> list[Project]:
    """``projects`` with their per-model quotas also as per-model limits (the lower of the two where
    both are set), so the per-model limit's refusal and narrowing (``per_model``) keep each project
    inside its per-model quotas under the isolated policy. Projects with none are returned as they
    are, so a pool without per-model figures decides exactly as before."""
    here = frozenset(models)
    found = []
    for p in projects:
        caps = model_caps(p, here)
        if caps:
            limits = {m: min(cap, p.limit_by_model.get(m, math.inf)) for m, cap in caps.items()}
            p = replace(p, limit_by_model={**p.limit_by_model, **limits})
        found.append(p)
    return found

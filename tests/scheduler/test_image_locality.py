"""Image locality (issue 32): between nodes the placement plugin scores alike, one that already
ran a job in the job's image (its cache likely holds the unpacked root) wins over the name order;
it never outweighs the plugin's own score, and jobs without an image are placed as before."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.scheduler import schedule
from gpupool.scheduler.config import SchedulerConfig
from tests.support.builders import node, pending, running, snapshot

IMAGE = "nvcr.io/nvidia/pytorch:24.10-py3"


def with_image(job_id: int, gpus: float = 1, workers: int = 1):  # type: ignore[no-untyped-def]
    job = pending(job_id, gpus=gpus, workers=workers)
    return replace(job, spec=replace(job.spec, image=IMAGE))


def placed(snap, placement: str) -> list[str]:  # type: ignore[no-untyped-def]
    result = schedule(snap, SchedulerConfig(placement=placement))
    return [p.node for start in result.starts for p in start.placements]


@pytest.mark.parametrize("placement", ["frag", "binpack", "spread"])
def test_a_node_holding_the_image_wins_a_tie(placement: str) -> None:
    nodes = [node("n1", 4), node("n2", 4), node("n3", 4)]
    bare = snapshot(nodes, [with_image(1)])
    assert placed(bare, placement) == ["n1"]  # the name breaks the tie, as for any job
    held = replace(bare, image_nodes={IMAGE: frozenset({"n3"})})
    assert placed(held, placement) == ["n3"]
    other = replace(bare, image_nodes={"python:3.11": frozenset({"n3"})})
    assert placed(other, placement) == ["n1"]  # another image's nodes are nothing to this job


def test_the_placement_score_still_comes_first() -> None:
    """binpack fills n1 (one GPU taken) before an idle n2, even where n2 holds the image."""
    nodes = [node("n1", 4), node("n2", 4)]
    snap = snapshot(nodes, [with_image(2)], [running(1, ("n1", (0,)))])
    held = replace(snap, image_nodes={IMAGE: frozenset({"n2"})})
    assert placed(snap, "binpack") == placed(held, "binpack") == ["n1"]


def test_a_gang_prefers_the_nodes_that_hold_its_image() -> None:
    nodes = [node(f"n{i}", 4) for i in range(1, 5)]
    held = snapshot(nodes, [with_image(1, gpus=4, workers=2)])
    held = replace(held, image_nodes={IMAGE: frozenset({"n2", "n4"})})
    assert sorted(placed(held, "spread")) == ["n2", "n4"]


def test_a_job_without_an_image_ignores_them() -> None:
    nodes = [node("n1", 4), node("n2", 4)]
    snap = replace(snapshot(nodes, [pending(1)]), image_nodes={IMAGE: frozenset({"n2"})})
    assert placed(snap, "frag") == ["n1"]

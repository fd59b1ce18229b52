"""Per-GPU-model quotas and limits (issue 34 item 2): how ``--quota``/``--limit`` read, and the
figures refused naming the numbers."""

from __future__ import annotations

import pytest

from gpupool.domain.errors import InvalidInput
from gpupool.domain.model_quotas import parse_figures, unknown_models
from gpupool.domain.projects import Project
from gpupool.domain.tree import validate


@pytest.mark.parametrize(
    ("text", "total", "by_model"),
    [
        ("8", 8.0, {}),  # a total, as before
        ("H100=8,A100=16", None, {"H100": 8.0, "A100": 16.0}),
        ("24, H100=8", 24.0, {"H100": 8.0}),  # both
        ("RTX 6000 Ada=2", None, {"RTX 6000 Ada": 2.0}),  # as the node reports it, spaces and all
    ],
)
def test_figures_read_as_a_total_per_model_pairs_or_both(text: str, total: float | None, by_model: dict) -> None:  # type: ignore[type-arg]
    assert parse_figures("quota", text) == (total, by_model)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "give a number of GPUs"),
        ("H100=x", "'x' is not a number"),
        ("H100=-1", "must be a number from 0"),
        ("8,9", "one total at most"),
        ("H100=1,H100=2", "model H100 given twice"),
        ("=4", "a model name before '='"),
    ],
)
def test_bad_figures_are_refused(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_figures("quota", text)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"quota": 8, "quota_by_model": {"H100": 8, "A100": 4}}, "quota 8 is below its per-model quotas' sum 12"),
        (
            {"quota": 4, "quota_by_model": {"H100": 4}, "limit_by_model": {"H100": 2}},
            "limit H100=2 is below quota H100=4",
        ),
        ({"limit_by_model": {"H100|A100": 2}}, "invalid GPU model"),
    ],
)
def test_contradicting_figures_are_refused_naming_the_numbers(kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(InvalidInput, match=message.replace("|", r"\|")):
        Project.create("vision", **kwargs)


def test_a_model_no_node_has_is_refused_naming_the_models_there_are() -> None:
    assert unknown_models(["H100"], ["H100", "A100"]) is None
    said = unknown_models(["H200", "H100"], ["H100", "A100", "H100"])
    assert said is not None and said.startswith("no node has a GPU of model H200; models here: A100, H100")
    assert "models here: none" in (unknown_models(["H100"], []) or "")


def test_childrens_per_model_quotas_may_not_sum_beyond_their_units() -> None:
    cs = Project.create("cs", quota=16, quota_by_model={"H100": 8})
    vision = Project.create("vision", quota=6, quota_by_model={"H100": 6}, parent="cs")
    validate(vision, [cs])
    nlp = Project.create("nlp", quota=4, quota_by_model={"H100": 4}, parent="cs")
    with pytest.raises(
        InvalidInput, match=r"cs has quota H100=8; its children's H100 quotas would sum to 10 \(nlp 4, vision 6\)"
    ):
        validate(nlp, [cs, vision])
    # A model the unit names no figure for is bounded by its total quota alone.
    validate(Project.create("nlp", quota=4, quota_by_model={"A100": 4}, parent="cs"), [cs, vision])

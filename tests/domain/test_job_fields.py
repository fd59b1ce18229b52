"""The check of a submission without a JobSpec (``domain/job_fields.py``, what ``gpupool submit``
runs) answers as ``JobSpec.create`` does: the same fields, the same body for the API, the same
refusals (issue 36)."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.domain.errors import InvalidInput
from gpupool.domain.job_fields import FIELD_ORDER, checked, submission_body
from gpupool.domain.jobs import SPEC_FIELDS, JobSpec

SUBMISSIONS: list[dict[str, Any]] = [
    {"command": ["python", "t.py"]},
    {"command": ["python", "t.py"], "gpus": 0.5, "gpu_memory": "10G", "memory": "8G", "cpus": "500m"},
    {"command": ["sleep", "1"], "workers": "2:8", "gpus": 1, "priority": "interactive", "env": {"A": "1"}},
    {"command": ["x"], "workers": 4, "cpus": 2, "max_restarts": 3, "max_runtime_s": 60, "gpu_model": "H100"},
    {"command": ["x"], "workdir": "/w", "checkpoint_dir": "ckpt", "expose": 8888, "project": "vision"},
    {"command": [], "image": "nvcr.io/nvidia/pytorch:24.10-py3", "gpu_power": "400W"},
    {"command": ["x"], "cpus": "1.25", "name": "a run"},
    {"command": []},  # refused: no command and no image
    {"command": ["x"], "gpus": -1},
    {"command": ["x"], "cpus": "9999"},
    {"command": ["x"], "cpus": "0.0001"},
    {"command": ["x"], "priority": "urgent"},
    {"command": ["x"], "project": "no spaces"},
    {"command": ["x"], "env": {"1BAD": "x"}},
    {"command": ["x"], "workers": "3:2"},
    {"command": ["x"], "gpus": 0, "gpu_power": "max"},
    {"command": ["x"], "image": "::bad::"},
]


def test_the_field_order_is_the_dataclasses() -> None:
    assert FIELD_ORDER == SPEC_FIELDS


@pytest.mark.parametrize("given", SUBMISSIONS, ids=lambda g: ",".join(f"{k}={v}" for k, v in g.items()))
def test_checked_answers_as_jobspec_create(given: dict[str, Any]) -> None:
    try:
        spec = JobSpec.create(**given)
    except InvalidInput as exc:
        with pytest.raises(InvalidInput) as caught:
            checked(**given)
        assert caught.value.message == exc.message
        return
    values = checked(**given)
    assert JobSpec(**values) == spec
    assert submission_body(values) == spec.submission()
    assert list(submission_body(values)) == list(spec.submission())  # the same order in the JSON
    assert JobSpec.create(**spec.submission()) == spec  # and the body asks for the same spec again

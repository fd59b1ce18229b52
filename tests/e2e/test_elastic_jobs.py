"""Elastic jobs through a real head (issue 35): ``examples/elastic_train.py`` under torchrun, submitted
as ``--workers 1:3`` with the launch line the guide gives, on simulated GPUs with gloo. It starts on
one worker beside a job holding the other GPUs, grows to three when that job ends, shrinks to two
when another project reclaims its quota, and its loss keeps falling through both re-forms.

The job passes ``--device cpu``: the head's GPUs are simulated."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.support.elastic import EPOCHS, LAUNCH, epochs_of, wait_for_world
from tests.support.headproc import HeadProcess, wait_state

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the elastic example needs torch"),
]


def test_an_elastic_job_grows_into_free_gpus_and_gives_back_only_its_extra_workers(
    head_factory: type[HeadProcess], tmp_path: Path
) -> None:
    head = head_factory(nodes=3, gpus=1).start()
    assert head.cli("project", "set", "b", "--quota", "1").returncode == 0
    with head.client() as c:
        blocker = c.submit(command=["sleep", "600"], gpus=1, workers=2)["id"]
        wait_state(c, blocker, ("running",))
        job = c.submit(
            command=["bash", "-c", LAUNCH],
            gpus=1,
            workers="1:3",
            checkpoint_dir=str(tmp_path / "ckpt"),
            env={"OMP_NUM_THREADS": "1"},
        )["id"]
        wait_state(c, job, ("running",))
        wait_for_world(c, job, 1)
        assert "1/1:3" in head.cli("jobs").stdout
        assert "elastic, on 1 of 1:3 workers: it grows when GPUs are free" in c.why(job)["reason"]

        c.cancel(blocker)  # its GPUs come free: the elastic job grows into them
        wait_for_world(c, job, 3)
        assert "3/1:3" in head.cli("jobs").stdout

        claim = c.submit(command=["sleep", "600"], gpus=1, project="b")["id"]  # within b's quota
        wait_state(c, claim, ("running",), timeout=60)
        wait_for_world(c, job, 2)
        done = wait_state(c, job, ("succeeded", "failed"), timeout=180)
        c.cancel(claim)
        shown = c.job(job)

    said = "\n".join(f"{e['kind']}: {e['message']}" for e in shown["events"])
    assert done["state"] == "succeeded", f"{epochs_of(c, job, 3)}\n{said}"
    messages = [e["message"] for e in shown["events"]]
    assert any(m.startswith("grew to 3 workers") for m in messages), messages
    assert any(m.startswith("shrank to 2 workers") and "project b" in m for m in messages), messages
    assert [w["workers"] for w in shown["width"]][:3] == [1, 3, 2], shown["width"]
    epochs = epochs_of(c, job, 3)
    assert [e for e, _, _ in epochs] == list(range(1, EPOCHS + 1)), "each re-form resumed from its checkpoint"
    worlds = [w for i, (_, w, _) in enumerate(epochs) if i == 0 or epochs[i - 1][1] != w]
    assert worlds in ([1, 3, 2], [1, 2, 3, 2]), epochs
    assert epochs[-1][2] < epochs[0][2] / 20, f"the loss fell through the grow and the shrink: {epochs}"

import pytest

from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import JobSpec, Priority


def test_defaults_and_normalisation() -> None:
    spec = JobSpec.create(command=["python", "train.py", "--lr", "3e-4"], memory="8G")
    assert spec.name == "train.py"
    assert spec.project == "default"
    assert spec.gpus == 1.0 and spec.workers == 1
    assert spec.memory_mib == 8192
    assert spec.priority is Priority.TRAIN
    assert spec.command == ("python", "train.py", "--lr", "3e-4")


def test_priority_ranks_inference_over_interactive_over_train() -> None:
    assert Priority.INFERENCE.rank > Priority.INTERACTIVE.rank > Priority.TRAIN.rank


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"command": []}, "empty command"),
        ({"command": [""]}, "empty command"),
        ({"command": ["x"], "gpus": -1}, "negative"),
        ({"command": ["x"], "gpus": 1.5}, "neither a whole number"),
        ({"command": ["x"], "workers": 0}, "workers"),
        ({"command": ["x"], "workers": 2, "gpus": 0.5}, "whole GPUs per worker"),
        ({"command": ["x"], "cpus": -2}, "cpus"),
        ({"command": ["x"], "priority": "urgent"}, "unknown priority 'urgent'"),
        ({"command": ["x"], "memory": "lots"}, "malformed memory"),
        ({"command": ["x"], "max_restarts": -1}, "max-restarts"),
        ({"command": ["x"], "project": "bad name!"}, "invalid project name"),
        ({"command": ["x"], "env": {"1BAD": "v"}}, "invalid environment variable"),
        ({"command": ["x"], "max_runtime_s": 0}, "max runtime"),
    ],
)
def test_bad_submissions_are_refused_with_a_message(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        JobSpec.create(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("gpus", [0, 0.5, 1, 4])
def test_cpu_only_fractional_and_whole_are_valid(gpus: float) -> None:
    assert JobSpec.create(command=["x"], gpus=gpus).gpus == gpus


@pytest.mark.parametrize(
    ("checkpoint_dir", "workdir", "expected"),
    [
        (None, "/home/alice", None),
        ("/data/ckpt/run1", None, "/data/ckpt/run1"),
        ("/data/ckpt/run1/", "/home/alice", "/data/ckpt/run1"),
        ("ckpt", "/home/alice/proj", "/home/alice/proj/ckpt"),
        ("./out/../ckpt", "/home/alice/proj/", "/home/alice/proj/ckpt"),
        ("../shared/ckpt", "/home/alice/proj", "/home/alice/shared/ckpt"),
        ("//data//ckpt", None, "/data/ckpt"),
    ],
)
def test_checkpoint_dir_is_absolute_and_a_relative_one_is_taken_from_the_workdir(
    checkpoint_dir: str | None, workdir: str | None, expected: str | None
) -> None:
    spec = JobSpec.create(command=["x"], workdir=workdir, checkpoint_dir=checkpoint_dir)
    assert spec.checkpoint_dir == expected
    assert spec.workdir == workdir


@pytest.mark.parametrize(
    ("checkpoint_dir", "workdir", "message"),
    [
        ("", "/w", "checkpoint dir must be a non-empty path"),
        ("   ", "/w", "checkpoint dir must be a non-empty path"),
        ("ckpt", None, "checkpoint dir 'ckpt' is relative and the job has no absolute workdir"),
        ("ckpt", "rel/wd", "workdir .rel/wd. must be an absolute path"),  # the workdir itself, first
        ("~/ckpt", "/w", "'~' is not expanded here"),
        ("/data/\x00ckpt", None, "must not contain NUL bytes"),
        ("/" + "d" * 5000, None, "longer than 4096 characters"),
    ],
)
def test_bad_checkpoint_dirs_are_refused_with_a_message(checkpoint_dir: str, workdir: str | None, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        JobSpec.create(command=["x"], workdir=workdir, checkpoint_dir=checkpoint_dir)


def test_one_submission_model_names_the_same_fields_everywhere() -> None:
    """``Submission`` (the client's typed keywords), ``JobSpec.create``'s keywords and the API's
    ``SubmitRequest`` cannot drift apart; the API's job JSON shows every field of the spec."""
    import inspect

    from gpupool.api.schemas.jobs import JobOut, SubmitRequest
    from gpupool.domain.jobs import SPEC_FIELDS, Submission

    create = set(inspect.signature(JobSpec.create).parameters) - {"cls"}
    assert set(Submission.__annotations__) == create == set(SubmitRequest.model_fields)
    assert set(SPEC_FIELDS) <= set(JobOut.model_fields)


def test_a_spec_survives_the_store_and_the_wire_unchanged() -> None:
    spec = JobSpec.create(
        command=["python", "t.py"],
        name="t",
        project="vision",
        gpus=0.5,
        memory="2G",
        priority="interactive",
        max_restarts=2,
        env={"A": "1"},
        workdir="/w",
        gpu_model="A100",
        max_runtime_s=60,
        gpu_memory="10G",
        checkpoint_dir="ck",
    )
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert JobSpec.create(**spec.submission()) == spec
    assert spec.to_dict()["priority"] == "interactive" and spec.to_dict()["command"] == ["python", "t.py"]

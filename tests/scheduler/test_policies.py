"""The named policies live in the scheduler, as data over tables of hooks, and every face (the
head's ``gpupool up --policy``, the simulator's ``--policy``) takes them by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.cli.main import main
from gpupool.domain.errors import InvalidInput
from gpupool.scheduler import SchedulerConfig, registry
from gpupool.scheduler.policies import POLICIES, preset
from gpupool.settings import Settings


def test_the_registry_lists_the_presets_each_naming_hooks_of_its_tables() -> None:
    assert list(POLICIES) == ["default", "greedy", "fifo", "fifo-isolated", "las", "fifo-share", "srtf-oracle"]
    assert POLICIES["default"] == SchedulerConfig()
    for config in POLICIES.values():
        registry.hooks(config)  # every name it gives is in a table


@pytest.mark.parametrize(
    ("config", "what"),
    [
        (SchedulerConfig(queue_order="magic"), "queue order"),
        (SchedulerConfig(quota_check="magic"), "quota check"),
        (SchedulerConfig(blocking="magic"), "blocking"),
        (SchedulerConfig(user_order="magic"), "user order"),
    ],
)
def test_an_unknown_hook_is_a_clear_error(config: SchedulerConfig, what: str) -> None:
    with pytest.raises(InvalidInput, match=f"unknown {what} 'magic': use one of "):
        registry.hooks(config)


def test_a_preset_takes_another_placement_and_refuses_an_unknown_name() -> None:
    assert preset("fifo", placement="spread") == SchedulerConfig(
        actions=("allocate",),
        placement="spread",
        job_order="fifo",
        queue_order="single",
        user_order="none",
        blocking="all",
    )
    with pytest.raises(
        InvalidInput,
        match="unknown policy 'bogus': use one of default, greedy, fifo, fifo-isolated, las, fifo-share, srtf-oracle",
    ):
        preset("bogus")


def test_the_head_settings_build_the_named_policy_with_the_placement() -> None:
    assert Settings(Path("/x")).scheduler_config == SchedulerConfig()
    settings = Settings(Path("/x"), policy="fifo-isolated", placement="topology")
    assert settings.scheduler_config == preset("fifo-isolated", placement="topology")


def test_up_with_an_unknown_policy_is_a_one_line_error_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["up", "--policy", "bogus"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: unknown policy 'bogus': use one of default, greedy, fifo, fifo-isolated, las, fifo-share, srtf-oracle"
    ]

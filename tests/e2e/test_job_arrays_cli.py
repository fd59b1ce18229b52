"""Job arrays from the CLI (issue 16): ``submit --array`` makes one array whose tasks each learn
their index, ``jobs`` folds it into one line (``--expand`` lists the tasks), ``show``, ``wait``
and ``cancel`` take the array's id or ``ID_INDEX``, and bad input is one line with exit code 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.headproc import HeadProcess, wait_for

pytestmark = pytest.mark.e2e


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_an_array_from_submit_to_wait_and_cancel(head: HeadProcess, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    script = f'echo "$GPUPOOL_ARRAY_ID $GPUPOOL_ARRAY_COUNT $GPUPOOL_JOB_ID" > {out}/$GPUPOOL_ARRAY_INDEX'
    made = ok(head.cli("submit", "--array", "0-6:2%2", "--gpus", "1", "--name", "sweep", "--", "sh", "-c", script))
    array_id = int(made.strip().splitlines()[-1])
    assert f"submitted array {array_id} (sweep)" in made and "4 tasks" in made

    assert head.cli("wait", str(array_id), "--timeout", "60").returncode == 0
    written = {p.name: p.read_text().split() for p in out.iterdir()}
    assert set(written) == {"0", "2", "4", "6"}
    assert {w[0] for w in written.values()} == {str(array_id)} and {w[1] for w in written.values()} == {"4"}
    assert written["0"][2] == str(array_id)  # the first task's job id is the array's

    summary = ok(head.cli("show", str(array_id)))
    assert f"array {array_id} (sweep)" in summary and "4 succeeded" in summary and "at most 2 at once" in summary
    task = json.loads(ok(head.cli("show", f"{array_id}_4", "-o", "json")))
    assert (task["array_id"], task["array_index"], task["state"]) == (array_id, 4, "succeeded")
    assert task["id"] == int(written["4"][2])

    folded = ok(head.cli("jobs", "--all"))
    assert f"{array_id}_*" in folded and "array of 4 tasks" in folded and f"{array_id}_2 " not in folded
    expanded = ok(head.cli("jobs", "--all", "--expand"))
    assert all(f"{array_id}_{i}" in expanded for i in (0, 2, 4, 6))
    listed = json.loads(ok(head.cli("jobs", "--all", "-o", "json")))  # JSON lists every task, as before
    assert sorted(j["array_index"] for j in listed if j["array_id"] == array_id) == [0, 2, 4, 6]

    held = int(ok(head.cli("submit", "--array", "0-99%1", "--gpus", "0", "--", "sleep", "600")).split()[-1])
    with head.client() as c:
        wait_for(lambda: c.array_task(held, 1)["reason_code"] == "array_limit", 30, what="the cap as its reason")
        assert c.array(held)["counts"] == {"running": 1, "pending": 99}
    one = ok(head.cli("cancel", f"{held}_5"))
    assert "cancelled" in one
    everything = ok(head.cli("cancel", str(held)))
    assert f"array {held}:" in everything and "99 cancelled" in everything  # the one cancelled before among them
    assert head.cli("wait", str(held), "--timeout", "30").returncode == 1  # they did not all succeed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["submit", "--array", "5-1", "--", "true"], "ends before it starts"),
        (["submit", "--array", "0-20000", "--", "true"], "at most 10000 tasks"),
        (["show", "12_x"], "ID_INDEX"),
        (["cancel", "99999"], "no job 99999"),
    ],
)
def test_bad_array_input_is_one_line_and_exit_code_2(shared_head: HeadProcess, args: list[str], message: str) -> None:
    result = shared_head.cli(*args)
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1

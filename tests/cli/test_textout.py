"""cli/textout.py prints what Rich prints (issue 36): generated tables, grids and styled lines are
printed both ways and compared. Into a pipe the characters must be the same, byte for byte; on a
terminal every visible character must be the same with the same style (Rich writes an escape
sequence per segment and styles padding spaces, which no one can see). Where textout declines,
Rich prints, so a decline is never wrong; the fixed examples check that it does not decline the
everyday output."""

from __future__ import annotations

import io
import os
import pty
import string
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich._emoji_codes import EMOJI
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from gpupool.cli import textout
from gpupool.cli.arrays import counts_text
from gpupool.cli.render import STATE_STYLE, events_table, job_detail, jobs_table, nodes_table, state_text
from gpupool.cli.styled import _NARROW_EXTRA, Grid, Styled, narrow, rich_cell
from gpupool.cli.tables import Col, Listing


def _rich(objects: list[Any], width: int, terminal: bool, **kwargs: Any) -> str:
    console = Console(
        file=io.StringIO(),
        width=width,
        force_terminal=terminal,
        color_system="standard" if terminal else None,
        highlight=False,
        soft_wrap=True,
        markup=False,
    )
    console.print(*(rich_cell(o) for o in objects), **kwargs)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(out, str)
    return out


def _visible(ansi: str) -> list[list[tuple[str, str]]]:
    """Each line's characters other than spaces, with the style each is shown in."""
    lines = []
    for line in ansi.split("\n"):
        text = Text.from_ansi(line)
        styles = [""] * len(text.plain)
        for span in text.spans:
            for i in range(span.start, span.end):
                styles[i] = f"{styles[i]} {span.style}".strip()
        lines.append([(ch, " ".join(sorted(styles[i].split()))) for i, ch in enumerate(text.plain) if ch != " "])
    return lines


def _same(objects: list[Any], width: int, **kwargs: Any) -> bool:
    """Whether textout printed ``objects`` (True) as Rich does; False where it left them to Rich."""
    plain = textout.render(objects, textout.Screen(width, False), **kwargs)
    painted = textout.render(objects, textout.Screen(width, True), **kwargs)
    assert (plain is None) == (painted is None)
    if plain is None:
        return False
    assert plain == _rich(objects, width, False, **kwargs)
    rich_painted = _rich(objects, width, True, **kwargs)
    assert _visible(painted or "") == _visible(rich_painted)
    assert Text.from_ansi(painted or "").plain == Text.from_ansi(rich_painted).plain
    return True


JOB = {
    "id": 12,
    "name": "train resnet",
    "project": "vision",
    "owner": "ann",
    "priority": "train",
    "state": "pending",
    "reason_code": "quota",
    "reason": "waiting for 4 GPUs: project vision holds 8 of its 8 (quota); 3 jobs ahead of it in the queue",
    "command": ["python", "train.py", "--epochs", "90", "--data", "/datasets/imagenet/train", "--lr", "0.1"],
    "workers": 2,
    "max_workers": None,
    "gpus": 1.0,
    "cpus": 4.0,
    "memory_mib": 32768,
    "gpu_model": "H100",
    "placements": [{"node": "node-1", "gpus": [0, 1]}],
    "restarts": 0,
    "max_restarts": 2,
    "starts": 0,
    "exit_code": None,
    "submitted_at": "2026-11-27T15:55:47.051710Z",
    "started_at": None,
    "finished_at": None,
    "events": [
        {"time": "2026-11-27T15:55:47.05Z", "kind": "submitted", "message": "submitted by ann: 2 × 1 GPU to vision"},
        {"time": "2026-11-27T15:55:48.05Z", "kind": "pending", "message": "waiting: " + "a long reason " * 8},
    ],
}
NODE = {
    "name": "node-1",
    "state": "up",
    "gpus_free": 2,
    "gpus_total": 8,
    "simulated": True,
    "cpus": 64,
    "memory_mib": 512 * 1024,
    "gpus": [{"index": i, "model": "H100", "jobs": [12] if i < 6 else [], "healthy": i != 7} for i in range(8)],
}


@pytest.mark.parametrize("width", [60, 80, 100, 132, 200])
def test_the_everyday_output_is_printed_without_rich_and_as_rich_does(width: int) -> None:
    running = {**JOB, "id": 13, "state": "running", "name": "a" * 30}
    assert _same([jobs_table([JOB, running])], width)
    assert _same([nodes_table([NODE, {**NODE, "name": "node-2", "state": "down", "drain_requested": True}])], width)
    assert _same([job_detail(JOB)], width)
    assert _same([events_table(JOB["events"])], width)  # type: ignore[arg-type]
    assert _same(["job 12 is ", state_text("pending"), ": [quota] waiting"], width, sep="")
    assert _same(["array 3: ", counts_text({"running": 2, "failed": 1, "pending": 5})], width, sep="")
    assert _same([Styled("tasks: ").append_text(counts_text({"succeeded": 4}))], width)
    assert _same(["submitted job 4 (sleep) to project default: 1 × 0 GPU; at 12:30:00 on http://127.0.0.1:9"], width)


def test_emoji_codes_are_replaced_as_rich_replaces_them() -> None:
    assert all(textout._EMOJI_NAME.fullmatch(name) or name in textout.LETTERLESS_EMOJI for name in EMOJI)
    for line in ["a :smile: b", "score :100: and :+1:", ":SMILE:", ":smile-text: x", "12:30:00 :no_such_one:"]:
        _same([line], 80)
    assert textout._emoji("12:30:00 and http://127.0.0.1:9") == "12:30:00 and http://127.0.0.1:9"


def test_the_narrow_characters_are_one_cell_and_kept_by_rich() -> None:
    for ch in sorted(_NARROW_EXTRA):
        assert cell_len(ch) == 1 and Text(ch).plain == ch, repr(ch)
    assert narrow("plain ascii ×·→") and not narrow("tab\there") and not narrow("wide 漢") and not narrow("e\u0301")


WORDS = st.text(alphabet=string.ascii_letters + string.digits + "-_./:×·", min_size=1, max_size=14)
CELL_TEXT = st.lists(WORDS, min_size=0, max_size=6).map(" ".join) | st.sampled_from(
    ["", " ", "a  b", " lead", "trail "]
)
STYLES = st.sampled_from(["", *sorted(set(STATE_STYLE.values())), "dim", "italic"])


def _cell() -> st.SearchStrategy[Any]:
    styled = st.builds(lambda t, s, more: Styled(t, s).append(*more), CELL_TEXT, STYLES, st.tuples(CELL_TEXT, STYLES))
    return CELL_TEXT | styled


@st.composite
def listings(draw: st.DrawFn) -> Listing:
    columns = draw(
        st.lists(
            st.builds(
                Col,
                header=st.sampled_from(["ID", "NAME", "STATE", "WHERE / WHY", "GPU → JOBS", "AGE", "X"]),
                justify=st.sampled_from(["left", "right"]),
                wrap=st.booleans(),
                drop=st.integers(0, 3),
            ),
            min_size=1,
            max_size=6,
        )
    )
    rows = draw(st.lists(st.lists(_cell(), min_size=len(columns), max_size=len(columns)), max_size=5))
    title = draw(st.none() | st.just("events"))
    return Listing(columns, rows, title=title)


@settings(max_examples=300, deadline=None)
@given(listing=listings(), width=st.integers(10, 160))
def test_any_listing_is_printed_as_rich_prints_it(listing: Listing, width: int) -> None:
    _same([listing], width)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.tuples(st.sampled_from(["job", "state", "command", "placements", "in use"]), _cell()), max_size=6),
    width=st.integers(10, 160),
)
def test_any_grid_is_printed_as_rich_prints_it(rows: list[tuple[str, Any]], width: int) -> None:
    _same([Grid(rows)], width)


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(_cell(), max_size=4), sep=st.sampled_from([" ", "", ", "]), end=st.sampled_from(["\n", ""]))
def test_any_line_is_printed_as_rich_prints_it(parts: list[Any], sep: str, end: str) -> None:
    _same(parts, 80, sep=sep, end=end)


@pytest.mark.parametrize(
    "env",
    [{}, {"COLUMNS": "120"}, {"COLUMNS": "abc"}, {"TERM": "xterm-256color"}, {"TERM": "dumb"}, {"NO_COLOR": "1"}],
    ids=str,
)
@pytest.mark.parametrize("terminal", [False, True])
def test_the_screen_is_what_rich_sees(env: dict[str, str], terminal: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("COLUMNS", "LINES", "TERM", *textout.RICH_DECIDES):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    leader, follower = pty.openpty()
    stream = open(follower, "w") if terminal else io.StringIO()  # noqa: SIM115 - closed below
    try:
        at = textout.screen(stream)  # type: ignore[arg-type]
        console = Console(file=stream, highlight=False, soft_wrap=True, markup=False)
        if at is not None:
            assert (at.width, at.styles) == (console.width, console.color_system is not None)
        else:
            assert any(name in env for name in textout.RICH_DECIDES) or (terminal and env.get("TERM") == "dumb")
    finally:
        stream.close()
        os.close(leader)
        if not terminal:
            os.close(follower)


def test_a_closed_pipe_ends_the_command_as_rich_does() -> None:
    """``gpupool jobs | head -1``: the reader is gone before the table is written. Rich's console
    sends the rest of stdout to /dev/null and exits 1, with no traceback; so does textout."""
    import subprocess
    import sys

    code = (
        "import os, sys\n"
        "r, w = os.pipe(); os.close(r); os.dup2(w, 1)\n"
        "from gpupool.cli.common import console\n"
        "console.print('a line that no one reads')\n"
        "print('never reached', file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"}
    )
    assert (done.returncode, done.stderr) == (1, "")

"""Tables that read at the width they are printed at (issue 19).

Rich shrinks every column of a table too wide for the terminal, so at 80 columns headers became
``proje…`` and ids could be cut. A ``Listing`` decides its layout when it is printed, from the
width it gets (a terminal's, or ``COLUMNS``): each column says whether it may wrap (names,
messages) or never wraps (ids, numbers, states), and which columns go first when even the
narrowest layout is too wide, as ``squeue`` and ``kubectl get`` leave columns out. A column is
never narrower than its header or, when it never wraps, than its longest cell; what was left out
is said under the table. Beyond 80 columns the wrapping columns take the room they need.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gpupool.cli.styled import Styled, narrow
from gpupool.domain.audit import printable

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult
    from rich.text import Text

WORD_CAP = 12  # a wrapping column is as wide as its longest word, up to this; longer words fold
GAP = 2  # columns are one space of padding each side, none at the table's edges


@dataclass(frozen=True, slots=True)
class Col:
    header: str
    justify: Literal["left", "right"] = "left"
    wrap: bool = False  # may break onto several lines (at spaces, else folded); else never wraps
    drop: int = 0  # 0: always shown; else left out at narrow widths, the highest first


class Listing:
    """A table of ``columns`` and ``rows`` (cells: str, ``Styled`` or rich Text) laid out when
    printed: by ``cli/textout.py`` where it can, else by Rich (``__rich_console__``)."""

    def __init__(self, columns: Sequence[Col], rows: Sequence[Sequence[Any]] = (), title: str | None = None) -> None:
        self.columns = list(columns)
        self.rows: list[Sequence[Any]] = [list(row) for row in rows]
        self.title = title

    def add_row(self, *cells: Any) -> None:
        self.rows.append(cells)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.table import Table
        from rich.text import Text

        least = [self.least(i) for i in range(len(self.columns))]
        shown = self.layout(options.max_width, least)
        widths = self.widths(shown, least, options.max_width)
        table = Table(box=None, header_style="bold", pad_edge=False, title=self.title, title_justify="left")
        for i in shown:
            col = self.columns[i]
            table.add_column(
                col.header, justify=col.justify, no_wrap=not col.wrap, overflow="fold", width=widths.get(i)
            )
        for row in self.rows:  # text as it is (never Rich markup), control characters escaped
            table.add_row(*(_shown(row[i]) if isinstance(row[i], str) else _rich(row[i]) for i in shown))
        yield table
        left_out = [self.columns[i].header for i in range(len(self.columns)) if i not in shown]
        if left_out:
            yield Text(
                f"(not shown at {options.max_width} columns: {', '.join(left_out)}; -o json has them)", style="dim"
            )

    def layout(self, width: int, least: list[int] | None = None) -> list[int]:
        """The indices of the columns shown at ``width``: all of them if their narrowest fits,
        else without the droppable ones, the highest ``drop`` first."""
        least = least or [self.least(i) for i in range(len(self.columns))]
        shown = list(range(len(self.columns)))
        droppable = sorted((i for i, c in enumerate(self.columns) if c.drop), key=lambda i: -self.columns[i].drop)
        while sum(least[i] for i in shown) + GAP * (len(shown) - 1) > width and droppable:
            shown.remove(droppable.pop(0))
        return shown

    def widths(self, shown: list[int], least: list[int], width: int) -> dict[int, int]:
        """Each shown column's width: a column that never wraps gets its longest cell; the
        wrapping ones share the rest, the narrow ones whole first (a water level), none below
        its least. Empty (Rich's own layout) when even the least widths do not fit."""
        room = width - GAP * (len(shown) - 1) - sum(least[i] for i in shown if not self.columns[i].wrap)
        wrapping = [i for i in shown if self.columns[i].wrap]
        if room < sum(least[i] for i in wrapping):
            return {}
        natural = {i: max(least[i], self._natural(i)) for i in wrapping}
        level = 0
        while level < max(natural.values(), default=0):
            if sum(min(natural[i], max(least[i], level + 1)) for i in wrapping) > room:
                break
            level += 1
        return {i: min(natural[i], max(least[i], level)) for i in wrapping}

    def _natural(self, i: int) -> int:
        return max((cell_len(line) for row in self.rows for line in _plain(row[i]).splitlines()), default=0)

    def least(self, i: int) -> int:
        """Column ``i``'s narrowest: its header whole, and a never-wrapping column's every cell."""
        col = self.columns[i]
        cells = [_plain(row[i]) for row in self.rows]
        if not col.wrap:
            return max([cell_len(col.header), *(cell_len(line) for c in cells for line in c.splitlines() or [""])])
        longest = max((cell_len(c) for c in cells), default=0)
        word = max((cell_len(w) for c in cells for w in c.split()), default=0)
        return max(cell_len(col.header), min(longest, word, WORD_CAP))


def _plain(cell: Any) -> str:
    return cell.plain if hasattr(cell, "plain") else str(cell)


def cell_len(text: str) -> int:
    """How many cells wide ``text`` prints: its length, unless a character is not one cell wide."""
    if narrow(text):
        return len(text)
    from rich.cells import cell_len as rich_cell_len

    return rich_cell_len(text)


def _rich(cell: Any) -> Any:
    return cell.to_rich() if isinstance(cell, Styled) else cell


def _shown(cell: str) -> Text:
    """A cell anyone may have written (a job's name, a token's, a message): shown as it is."""
    from rich.text import Text

    if cell.replace("\n", "").isprintable():
        return Text(cell)
    return Text("\n".join(printable(line, 100_000, backslash=False) or "" for line in cell.split("\n")))

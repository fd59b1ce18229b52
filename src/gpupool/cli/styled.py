"""Text with colours, and a two-column grid, that need no Rich until Rich is asked to print them.

The everyday commands print states in colour (``running`` in green) and tables of jobs and nodes.
Building those with Rich's ``Text`` and ``Table`` costs every command Rich's import (~35 ms) even
where ``cli/textout.py`` prints them itself. These hold the same content, and give Rich its own
objects (``to_rich``) when Rich does print them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

# Characters outside printable ASCII that Rich measures one cell wide and prints as they are: the
# ones gpupool's own tables use (the multiplication sign of 2x1 GPUs, a middle dot for a free GPU,
# an arrow in a header) and Latin-1's letters.
# tests/cli/test_textout.py checks each against Rich's own measure.
_NARROW_EXTRA = frozenset("×·→…–—‘’“”€") | frozenset(
    chr(c) for c in range(0xA1, 0x100) if c != 0xAD and unicodedata.category(chr(c))[0] in "LNPS"
)


def narrow(text: str) -> bool:
    """Whether every character of ``text`` is one Rich prints as it is in one cell (no control
    character, tab, combining mark or wide character), so its width is its length."""
    return (text.isascii() and text.isprintable()) or all(
        (c.isascii() and c.isprintable()) or c in _NARROW_EXTRA for c in text
    )


class Styled:
    """A line of text in parts, as Rich's ``Text`` holds it: a base style over the whole (what
    ``Text(text, style=...)`` gives) and parts appended with styles of their own. A style is
    Rich's name for it: "green", "bold red", "" for none."""

    __slots__ = ("parts", "style")

    def __init__(self, text: str = "", style: str = "") -> None:
        self.style = style
        self.parts: list[tuple[str, str]] = [(text, "")] if text else []

    def append(self, text: str, style: str = "") -> Styled:
        if text:
            self.parts.append((text, style))
        return self

    def append_text(self, other: Styled) -> Styled:
        """``other``'s parts after these, each keeping ``other``'s base style as Rich's does."""
        for text, style in other.parts:
            self.parts.append((text, join_styles(other.style, style)))
        return self

    def styled_parts(self) -> list[tuple[str, str]]:
        """Each part with the style it is printed in: the base style, then its own over it."""
        return [(text, join_styles(self.style, style)) for text, style in self.parts]

    @property
    def plain(self) -> str:
        return "".join(text for text, _ in self.parts)

    def __bool__(self) -> bool:
        return bool(self.plain)

    def __str__(self) -> str:
        return self.plain

    def __repr__(self) -> str:
        return f"Styled({self.parts!r}, style={self.style!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Styled) and (self.parts, self.style) == (other.parts, other.style)

    __hash__ = None  # type: ignore[assignment]

    def to_rich(self) -> Text:
        """Rich's ``Text`` with the same base style and parts."""
        from rich.text import Text

        out = Text(style=self.style)
        for text, style in self.parts:
            out.append(text, style=style or None)
        return out


def join_styles(under: str, over: str) -> str:
    """Two style names as one, ``over`` winning where they differ (Rich's ``Style.__add__``)."""
    return f"{under} {over}".strip()


class Grid:
    """Keys in bold beside their values, as ``gpupool show`` prints a job: Rich's
    ``Table.grid(padding=(0, 2))`` with a bold first column and a second that folds."""

    def __init__(self, rows: Sequence[tuple[str, str | Styled]] = ()) -> None:
        self.rows: list[tuple[str, str | Styled]] = list(rows)

    def add_row(self, key: str, value: str | Styled) -> None:
        self.rows.append((key, value))

    def __iter__(self) -> Iterator[tuple[str, str | Styled]]:
        return iter(self.rows)

    def to_rich(self) -> Table:
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column(overflow="fold")
        for key, value in self.rows:
            table.add_row(key, rich_cell(value))
        return table


def rich_cell(value: Any) -> Any:
    """What Rich should be given for ``value``: Rich's own object for a Styled or a Grid."""
    return value.to_rich() if isinstance(value, Styled | Grid) else value

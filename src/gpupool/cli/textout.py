"""Printing what the everyday commands print, as Rich prints it, without importing Rich.

Importing Rich's console, table and text costs a command ~35 ms, a third of what ``gpupool jobs``
may take. The commands print plain lines, ``Styled`` text, ``Listing`` tables and ``Grid``s; for
those, on an ordinary terminal or a pipe, this module writes the same characters Rich writes, in
the same places and styles: the same column widths, the same word wrapping (``divide_line`` is
Rich's rule), the same padding. For anything else (a width Rich's own layout decides, a character
that is not one cell wide, an environment that changes how Rich writes such as FORCE_COLOR or
NO_COLOR) ``render`` answers None and the caller hands the objects to Rich.
``tests/cli/test_textout.py`` prints generated tables both ways and compares them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO

from gpupool.cli.styled import Grid, Styled, join_styles, narrow

if TYPE_CHECKING:
    from gpupool.cli.tables import Listing

# Variables with which Rich decides differently whether, and how, to write styles or how wide.
RICH_DECIDES = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES")
_ATTRIBUTES = {"bold": "1", "dim": "2", "italic": "3", "underline": "4"}
_COLORS = {
    name: str(30 + n) for n, name in enumerate(("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"))
}
# Rich replaces :name: in a printed string with its emoji (rich/_emoji_replace.py's pattern). A
# name is lowercase letters, digits and a few signs, and has a letter but for five
# (tests/cli/test_textout.py checks Rich's table against both).
_EMOJI = re.compile(r"(:(\S*?)(?:(?:\-)(emoji|text))?:)")
_NAME_SIGNS = "0-9a-z_!#&()*+.\\-\u00e3\u00e5\u00e7\u00e9\u00ed\u00f4\u2019"
_EMOJI_NAME = re.compile(f"[{_NAME_SIGNS}]*[a-z\u00e3\u00e5\u00e7\u00e9\u00ed\u00f4][{_NAME_SIGNS}]*")
LETTERLESS_EMOJI = frozenset({"100", "1234", "+1", "-1", "__1"})
_WORD = re.compile(r"\s*\S+\s*")  # Rich's word for wrapping: the word with the spaces around it
_TRAILING = re.compile(r"\s+$")

Part = tuple[str, str]  # text, style
Line = list[Part]


class Unsupported(Exception):
    """Something Rich should print."""


class Screen(NamedTuple):
    width: int
    styles: bool  # whether styles are written (a terminal)


def screen(stream: TextIO) -> Screen | None:
    """Where ``stream`` prints, as a Rich console on it would see it: its width and whether it
    is a terminal. None where Rich's own rules should decide."""
    env = os.environ
    if any(name in env for name in RICH_DECIDES):
        return None
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):
        terminal = False
    if terminal and env.get("TERM", "").lower() in ("dumb", "unknown"):
        return None
    columns = env.get("COLUMNS")
    if columns is not None and columns.isdigit():
        width = int(columns)
        return Screen(width, terminal) if width > 0 else None
    width = 0
    for fd in (0, 1, 2):  # Rich asks stdin, stdout, stderr in turn, whichever stream it writes to
        try:
            width = os.get_terminal_size(fd).columns
        except (AttributeError, ValueError, OSError):
            continue
        break
    return Screen(width or 80, terminal)


def render(objects: Sequence[Any], at: Screen, *, sep: str = " ", end: str = "\n") -> str | None:
    """What Rich's ``Console.print(*objects, sep=sep, end=end)`` writes (gpupool's console: no
    markup, no highlighting, soft wrap), or None where Rich should print it."""
    try:
        out: list[str] = []
        run: list[Styled] = []
        for item in objects:
            if isinstance(item, str | Styled):
                run.append(_text(item))
                continue
            if run:
                out.append(_paint(_joined(run, sep), at.styles) + end)
                run = []
            out.extend(_paint(line, at.styles) + "\n" for line in _block(item, at.width))
        if run or not objects:
            out.append(_paint(_joined(run, sep), at.styles) + end)
        return "".join(out)
    except Unsupported:
        return None


def _text(item: str | Styled) -> Styled:
    if isinstance(item, Styled):
        if not narrow(item.plain):
            raise Unsupported
        return item
    if ":" in item:
        item = _emoji(item)
    if not narrow(item.replace("\n", "")):
        raise Unsupported
    return Styled(item)


def _emoji(text: str) -> str:
    """``text`` with Rich's emoji codes (``:smile:``) replaced as Rich's console replaces them. A
    URL's ``:9`` or a time's ``12:30:00`` cannot name one and is left as it is without asking
    Rich; a word that could is looked up in Rich's own table (~1 ms)."""
    names = [match.group(2).lower() for match in _EMOJI.finditer(text)]
    if not any(_EMOJI_NAME.fullmatch(name) or name in LETTERLESS_EMOJI for name in names):
        return text
    try:
        from rich._emoji_replace import _emoji_replace
    except ImportError:  # a Rich without it: Rich prints the line
        raise Unsupported from None
    return _emoji_replace(text)


def _joined(run: list[Styled], sep: str) -> Line:
    line: Line = []
    for i, item in enumerate(run):
        if i and sep:
            line.append((sep, ""))
        line.extend(item.styled_parts())
    return line


def _block(item: Any, width: int) -> list[Line]:
    from gpupool.cli.tables import Listing

    if isinstance(item, Listing):
        return listing_lines(item, width)
    if isinstance(item, Grid):
        return grid_lines(item, width)
    raise Unsupported


def listing_lines(listing: Listing, width: int) -> list[Line]:
    """A ``Listing`` as Rich lays out the table it builds: no box, one space of padding each side
    of a column and none at the edges, a bold header, cells folded at the column's width."""
    least = [listing.least(i) for i in range(len(listing.columns))]
    shown = listing.layout(width, least)
    widths = listing.widths(shown, least, width)
    if not shown or (not widths and any(listing.columns[i].wrap for i in shown)):
        raise Unsupported  # Rich's own layout
    columns = [listing.columns[i] for i in shown]
    sizes = [widths.get(i, least[i]) for i in shown]
    if sum(sizes) + 2 * (len(sizes) - 1) > width:
        raise Unsupported
    lines: list[Line] = []
    table_width = sum(sizes) + 2 * (len(sizes) - 1)
    if listing.title is not None:
        title = _text(listing.title)
        if len(title.plain) > table_width:
            raise Unsupported
        lines.append([(text, join_styles("italic", style)) for text, style in title.styled_parts()])
    header = [Styled(c.header, "bold") for c in columns]
    lines += _row(header, sizes, [c.wrap for c in columns], [c.justify for c in columns], pad=2)
    for row in listing.rows:
        cells = [_cell(row[i]) for i in shown]
        lines += _row(cells, sizes, [c.wrap for c in columns], [c.justify for c in columns], pad=2)
    left_out = [listing.columns[i].header for i in range(len(listing.columns)) if i not in shown]
    if left_out:
        lines.append([(f"(not shown at {width} columns: {', '.join(left_out)}; -o json has them)", "dim")])
    return lines


def grid_lines(grid: Grid, width: int) -> list[Line]:
    """A ``Grid`` as Rich's ``Table.grid(padding=(0, 2))`` lays it out: keys in bold, two spaces,
    values folded at what is left of the width."""
    rows = [
        (_text(key), _text(value) if isinstance(value, str) and "\n" not in value else _cell(value))
        for key, value in grid
    ]
    if not rows:
        return []
    keys = max(len(k.plain) for k, _ in rows) + 2  # the key column with its padding
    values = min(max(len(line) for _, v in rows for line in [v.plain]), width)
    if keys + values > width:
        excess = keys + values - width
        if excess > values - keys:
            raise Unsupported  # Rich shares the cut between both columns
        values -= excess
    if keys - 2 > width or values < 1:
        raise Unsupported
    lines: list[Line] = []
    for key, value in rows:
        lines += _row([Styled(key.plain, "bold"), value], [keys - 2, values], [True, True], ["left", "left"], pad=2)
    return lines


def _cell(value: Any) -> Styled:
    """A Listing's cell: a string is shown as it is (``tables._shown``), never read for emoji."""
    if isinstance(value, Styled):
        return _text(value)
    if isinstance(value, str):
        if "\n" in value or not narrow(value):
            raise Unsupported
        return Styled(value)
    raise Unsupported


def _row(cells: list[Styled], sizes: list[int], wraps: list[bool], justify: list[str], *, pad: int) -> list[Line]:
    """One row's lines: each cell wrapped in its column, the shorter ones filled with blanks."""
    laid = [_wrap(cell, size, wrap, how) for cell, size, wrap, how in zip(cells, sizes, wraps, justify, strict=True)]
    height = max(len(cell_lines) for cell_lines in laid)
    lines: list[Line] = []
    for n in range(height):
        line: Line = []
        for i, cell_lines in enumerate(laid):
            if i:
                line.append((" " * pad, ""))
            line += cell_lines[n] if n < len(cell_lines) else [(" " * sizes[i], "")]
        lines.append(line)
    return lines


def _wrap(cell: Styled, width: int, wrap: bool, justify: str) -> list[Line]:
    """``cell`` in lines of exactly ``width``, as Rich's ``Text.wrap`` makes them (fold overflow)."""
    plain = cell.plain
    breaks = divide_line(plain, width) if wrap else []
    parts = cell.styled_parts()
    out: list[Line] = []
    for start, stop in zip([0, *breaks], [*breaks, len(plain)], strict=True):
        text = plain[start:stop]
        if len(text) > width:  # rstrip_end: trailing spaces beyond the width go
            trailing = _TRAILING.search(text)
            if trailing is not None:
                text = text[: len(text) - min(len(trailing.group(0)), len(text) - width)]
        if justify == "right":
            text = text.rstrip()
        text = text[:width]
        line = _slice(parts, start, start + len(text))
        room = width - len(text)
        out.append(
            [(" " * room, ""), *line] if justify == "right" and room else [*line, (" " * room, "")] if room else line
        )
    return out


def divide_line(text: str, width: int) -> list[int]:
    """Rich's ``divide_line`` with fold, for text whose characters are one cell each: where the
    lines of ``text`` wrapped at ``width`` begin, after the first."""
    breaks: list[int] = []
    offset = 0
    for match in _WORD.finditer(text):
        start, word = match.start(), match.group(0)
        length = len(word.rstrip())
        if width - offset >= length:
            offset += len(word)
        elif length > width:
            chunks = [word[i : i + width] for i in range(0, len(word), width)]
            for n, chunk in enumerate(chunks):
                if start:
                    breaks.append(start)
                if n == len(chunks) - 1:
                    offset = len(chunk)
                else:
                    start += len(chunk)
        elif offset and start:
            breaks.append(start)
            offset = len(word)
    return breaks


def _slice(parts: list[Part], start: int, stop: int) -> Line:
    out: Line = []
    at = 0
    for text, style in parts:
        lo, hi = max(start, at), min(stop, at + len(text))
        if lo < hi:
            out.append((text[lo - at : hi - at], style))
        at += len(text)
    return out


def _paint(line: Line, styles: bool) -> str:
    if not styles:
        return "".join(text for text, _ in line)
    return "".join(f"\x1b[{_sgr(style)}m{text}\x1b[0m" if style and text else text for text, style in line)


def _sgr(style: str) -> str:
    """Rich's escape codes for a style of attributes and at most one of the eight colours."""
    attributes: set[str] = set()
    color = None
    for word in style.split():
        if word in _ATTRIBUTES:
            attributes.add(_ATTRIBUTES[word])
        elif word in _COLORS:
            color = _COLORS[word]
        else:
            raise Unsupported
    codes = sorted(attributes) + ([color] if color else [])
    return ";".join(codes)

"""Fixed-width text tables whose columns line up with Chinese text in a terminal."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence


def display_width(text: str) -> int:
    """Terminal columns `text` takes: wide/full-width (CJK) characters take 2, combining marks 0."""
    width = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        width += 2 if unicodedata.east_asian_width(char) in "WF" else 1
    return width


def _pad(text: str, width: int, right: bool = False) -> str:
    # str.ljust counts code points, which misaligns Chinese labels.
    fill = " " * (width - display_width(text))
    return fill + text if right else text + fill


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], footer: Sequence[Sequence[str]] = ()) -> str:
    """Render string cells as a fixed-width table: the header, a rule, ``rows``, then a rule and ``footer``.

    The first column is left-aligned, the others right-aligned to one common width, two spaces
    apart; widths count terminal columns (``display_width``), so every line, Chinese names
    included, has the same display width. No trailing newline.
    """
    table = [header, *rows, *footer]
    name_width = max(display_width(row[0]) for row in table)
    cell_width = max((display_width(cell) for row in table for cell in row[1:]), default=0)

    def line(row: Sequence[str]) -> str:
        return _pad(row[0], name_width) + "".join("  " + _pad(cell, cell_width, right=True) for cell in row[1:])

    rule = "-" * (name_width + (len(header) - 1) * (cell_width + 2))
    return "\n".join([line(header), rule, *map(line, rows), *([rule, *map(line, footer)] if footer else [])])

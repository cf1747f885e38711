"""Tables: whether a TSV/CSV/Excel first row is a header, found by what it holds, and Excel workbooks read
as pandas reads them.

A first row is a header when none of its values occurs again in its column and at least one column
gives evidence: a column whose values repeat (labels) or are all numbers, where the first row's value
is not among them; or, for a column of texts, a first value that looks like a name (short, no
punctuation) beside longer texts. A value found again below it makes the row data.
"""

from __future__ import annotations

import os
import re
import shlex
import statistics
from typing import Callable, Optional

from ernie_ft.errors import UserError

EXCEL = (".xlsx", ".xlsm")
_ZIP, _OLE = b"PK\x03\x04", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_NAME = re.compile(r"^[^\W\d][\w ./()-]{0,19}$")  # a column name: a word, no sentence punctuation
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_PLAIN = re.compile(r"^[^\s'\"\\$`!*?;&|<>(){}\[\]#~]+$")  # a word a shell takes as it is


def looks_like_header(rows: list[tuple[int, list[str]]]) -> bool:
    """Whether the first of ``rows`` ([(line, fields), ...]) names the columns of the rest (see the module)."""
    body = [fields for _, fields in rows[1:]]
    if len(body) < 2:  # one row below it says nothing about what a column holds
        return False
    evidence = False
    for i, value in enumerate(field.strip() for field in rows[0][1]):
        column = [fields[i].strip() for fields in body if i < len(fields) and fields[i].strip()]
        if not value or not column:
            continue
        if value in column:
            return False
        if len(set(column)) < len(column) or all(_NUMBER.match(v) for v in column):
            evidence |= not _NUMBER.match(value)  # labels or numbers below, a name above
        elif _NAME.match(value) and len(value) * 2 <= statistics.median(len(v) for v in column):
            evidence = True
    return evidence


def header_summary(first_line: int, columns: list[str], header: bool, forced: Optional[bool]) -> str:
    """The loading line's words on the header: ``header: line 1 (评论, 情感)`` or ``no header``."""
    how = " (--header)" if forced is True else " (--no-header)" if forced is False else ""
    if header:
        return f"header: line {first_line} ({', '.join(columns)}){how}"
    return f"no header{how}, columns numbered from 0"


def binary_kind(path: str) -> Optional[str]:
    """'excel' for an .xlsx workbook (by extension or content), 'xls' for an Excel 97-2003 file, else None."""
    if os.path.splitext(path)[1].lower() in EXCEL:
        return "excel"
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return None  # read_text_file names what is wrong with the path
    if head == _OLE:
        return "xls"
    if head.startswith(_ZIP):
        import zipfile

        try:
            with zipfile.ZipFile(path) as z:
                return "excel" if any(n.startswith("xl/") for n in z.namelist()) else None
        except zipfile.BadZipFile:
            return None
    return None


def excel_rows(path: str, where: str, sheet: Optional[str] = None) -> list[tuple[int, list[str]]]:
    """[(row number, [cell text, ...]), ...] of a workbook's first sheet (or ``sheet``), blank rows skipped.

    Read as pandas reads it (``pandas.read_excel`` with openpyxl): every cell as text, a whole number
    without ".0", an empty cell as "". openpyxl is an optional dependency: without it, one error line
    says how to install it.
    """
    if binary_kind(path) == "xls":
        raise UserError(
            f"{where} is an Excel 97-2003 workbook (.xls), which is not read here; save it as .xlsx "
            "(Excel: File > Save As) or as CSV UTF-8"
        )
    try:
        import openpyxl  # noqa: F401  (pandas needs it; checked first for a clear message)
    except ImportError:
        raise UserError(
            f"{where} is an Excel workbook, read with openpyxl, which is not installed; install it with: "
            "pip install openpyxl (or pip install 'ernie_ft[excel]')"
        ) from None
    import pandas as pd

    try:
        book = pd.ExcelFile(path, engine="openpyxl")
    except Exception as e:  # zipfile, openpyxl and pandas each raise their own kinds for a damaged file
        message = f"{where} cannot be read as an Excel workbook ({type(e).__name__}: {e}); save it again"
        raise UserError(message) from None
    with book:
        if sheet is not None and sheet not in book.sheet_names:
            raise UserError(f"--sheet {sheet!r} not found in {where}; its sheets: {', '.join(book.sheet_names)}")
        frame = book.parse(sheet if sheet is not None else 0, header=None, dtype=object, keep_default_na=False)
    rows = []
    for index, values in zip(frame.index, frame.itertuples(index=False, name=None)):
        fields = [_cell(v) for v in values]
        if any(f.strip() for f in fields):
            rows.append((int(index) + 1, fields))
    if not rows:
        raise UserError(f"{where}: sheet {sheet or book.sheet_names[0]!r} is empty; it needs one record per row")
    return rows


def with_sheets(error: UserError, path: str, sheet: Optional[str], read: Callable[[str], object]):
    """``error`` (what was wanted is not on the sheet read) with, for a workbook of several sheets, their names, the
    sheet that was read and ``--sheet`` with the one where ``read(name)`` succeeds, if one does; else ``error``."""
    if binary_kind(path) != "excel":
        return error
    import pandas as pd

    try:
        with pd.ExcelFile(path, engine="openpyxl") as book:
            names = list(book.sheet_names)
    except Exception:  # a damaged or unreadable workbook: the error already says so
        return error
    current = names[0] if sheet is None and names else sheet
    if len(names) < 2 or current not in names:
        return error
    fits = next((name for name in names if name != current and _reads(read, name)), None)
    given = f"sheet {current!r} was read" + (" (the first)" if sheet is None else "")
    if fits is None:
        advice = "no other sheet has what is needed either; give the sheet with --sheet NAME"
    else:
        shown = fits if _PLAIN.match(fits) else shlex.quote(fits)  # 数据 as it is, '数据 2024' quoted
        advice = f"sheet {fits!r} has what is needed: give --sheet {shown}"
    return UserError(f"{error}. The workbook has {len(names)} sheets ({', '.join(names)}) and {given}; {advice}")


def _reads(read: Callable[[str], object], sheet: str) -> bool:
    try:
        read(sheet)
    except UserError:
        return False
    return True


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if value != value else str(int(value)) if value.is_integer() else repr(value)
    return str(value)

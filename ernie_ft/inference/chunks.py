"""A prediction input read in chunks of records, so that memory does not grow with the file: plain text (one text a
line), JSON Lines, TSV or CSV with a header line naming its columns, and Parquet.

A file is read the way ``data.sources`` reads it whole (the same lines, numbered the same, blank lines skipped), as
records a task's ``read_records`` takes; or, for ``predict`` (``blanks``), with every line a record (after a table's
header), a blank one a record with an empty text that it answers in its place (``inference.records``), so that the
answers keep the input's rows. What the chunked reading cannot take as the whole-file readers would (an
annotation tool's export, a table without a header naming its columns, a CoNLL file, UTF-16) is left to them:
``open_chunks`` returns None with the reason. A mistake in the file is named by the whole-file reader: ``whole``, a
function that reads the file whole and raises its error, is called for the message.
"""

from __future__ import annotations

import codecs
import csv
import functools
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Optional

from ernie_ft.data import annotations
from ernie_ft.data.sources import _FORMATS, KNOWN_COLUMNS, column_key
from ernie_ft.errors import UserError

Rows = list[tuple[int, dict]]
"""A chunk: (line number from 1, or row number for Parquet; the record) per record, in file order."""


@dataclass
class Chunks:
    """The records of one input file, chunk by chunk."""

    path: str
    kind: str
    """'parquet', 'jsonl', 'lines', 'tsv' or 'csv'."""
    total: int
    """How many records the file holds (its non-blank lines, or with ``blanks`` all its lines, less a table's header
    and the lines before it; a CSV record over several lines counts each line, so this is an upper bound there)."""
    read: Callable[[int], Iterator[Rows]]
    """``read(skip)``: the chunks after the first ``skip`` records."""


def open_chunks(
    path: str, chunk_size: int, text_field: Optional[str], columns: tuple, whole: Callable[[], None], blanks=False
) -> tuple[Optional[Chunks], str]:
    """(the chunks of ``path``, '') or (None, why it is read whole). ``text_field``: the record field a line of plain
    text becomes (None: plain text is read whole); ``columns``: column names besides ``KNOWN_COLUMNS`` that mark a
    table's header line (the column flags, the training run's); ``whole()``: reads the file whole, raising its
    error (called when the chunked reading finds a mistake, so the message is the one the file always had);
    ``blanks``: a blank line is a record (with an empty text), not skipped."""
    if os.path.splitext(path)[1].lower() == ".parquet":
        return _parquet(path, chunk_size), ""
    if not os.path.isfile(path):
        return None, "not a file"
    with open(path, "rb") as f:
        head = f.read(4)
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return None, "UTF-16 is read whole"
    first, lines, before = _first_line(path, whole, blanks)
    if first is None:
        whole()  # an empty file: the reader's error
        return None, "empty"
    fmt = _FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt == "lines" and "\t" in first:
        fmt = "tsv"
    elif fmt is None:
        fmt = "jsonl" if first.lstrip().startswith("{") else "tsv" if "\t" in first else "csv"
    if fmt == "jsonl":
        if not first.lstrip().startswith("{"):
            return None, "not JSON Lines (a JSON document or array is one value)"
        try:
            if annotations.load(first, f"--input: {path}") is not None:
                return None, "an annotation tool's export"
        except UserError:
            return None, "its first line is not one JSON object"
        return Chunks(path, "jsonl", lines, functools.partial(_records, path, chunk_size, _json, whole, blanks)), ""
    if _looks_like_conll(path):
        return None, "it looks like CoNLL (a token and a tag a line)"
    if fmt == "lines":
        if text_field is None:
            return None, "this task's records are not one text each"

        def line_record(n: int, line: str) -> dict:
            return {text_field: line}

        read = functools.partial(_records, path, chunk_size, line_record, whole, blanks)
        return Chunks(path, "lines", lines, read), ""
    header = first.split("\t") if fmt == "tsv" else next(csv.reader([first]))
    known = {column_key(c) for c in (*KNOWN_COLUMNS, *columns) if c and not str(c).isdigit()}
    if not any(column_key(field) in known for field in header):
        return None, "no header line naming its columns (a text column such as text or text_a)"
    read = _table_chunks(path, fmt, [field.strip() for field in header], chunk_size, whole, blanks)
    return Chunks(path, fmt, lines - before, read), ""


def _first_line(path: str, whole: Callable[[], None], blanks: bool) -> tuple[Optional[str], int, int]:
    """(the first non-blank line of ``path``, or None; how many lines it has (``blanks``) or non-blank lines; how many
    of them that first line ends), reading bytes a block at a time."""
    first, count, header = None, 0, 0
    for _, line in _lines(path, whole):
        count += 1 if blanks or line.strip() else 0
        if first is None and line.strip():
            first, header = line, count
    return first, count, header


def _lines(path: str, whole: Callable[[], None], skip_blank: bool = False) -> Iterator[tuple[int, str]]:
    """(line number, text without its line end) per line of a UTF-8 file (a BOM dropped), split on "\\n" only as
    ``sources.read_text_file`` splits; a NUL byte or bytes that are not UTF-8 call ``whole()`` for the message."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if b"\x00" in raw:
                whole()
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError:
                whole()
                raise UserError(f"--input: {path}:{n}: not UTF-8; save it as UTF-8") from None
            line = line[:-2] if line.endswith("\r\n") else line[:-1] if line.endswith("\n") else line
            if not skip_blank or line.strip():
                yield n, line


def _records(
    path: str, size: int, record: Callable, whole: Callable[[], None], blanks: bool, skip: int
) -> Iterator[Rows]:
    """Chunks of ``record(n, line)`` for the lines of ``path`` (without ``blanks``, the non-blank ones), after the
    first ``skip``."""
    chunk, seen = [], 0
    for n, line in _lines(path, whole, skip_blank=not blanks):
        seen += 1
        if seen <= skip:
            continue
        try:
            chunk.append((n, record(n, line)))
        except ValueError:
            whole()
            raise UserError(f"--input: {path}:{n}: not one JSON object") from None
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _json(n: int, line: str) -> dict:
    """A JSON Lines record ({} for a blank line); ValueError for a line that is not one JSON object."""
    value = json.loads(line) if line.strip() else {}
    if not isinstance(value, dict):
        raise ValueError(line)
    return value


def _table_chunks(path: str, fmt: str, columns: list[str], size: int, whole: Callable[[], None], blanks: bool):
    """``Chunks.read`` of a TSV or CSV file whose first non-blank line is the header ``columns``."""

    def read(skip: int) -> Iterator[Rows]:
        chunk, seen, header_seen = [], 0, False
        for n, fields in _table_rows(path, fmt, whole, blanks):
            if not header_seen:
                header_seen = True
                continue
            seen += 1
            if seen <= skip:
                continue
            if not any(field.strip() for field in fields):
                fields = [""] * len(columns)  # a blank line: a record with an empty text
            if len(fields) != len(columns):
                whole()  # the field-count message, with its hint
                raise UserError(f"--input: {path}:{n}: expected {len(columns)} fields, found {len(fields)}")
            chunk.append((n, dict(zip(columns, fields))))
            if len(chunk) == size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    return read


def _table_rows(path: str, fmt: str, whole: Callable[[], None], blanks: bool) -> Iterator[tuple[int, list[str]]]:
    """(line where the row starts, fields) per row with any text (``blanks``: per row from the first with any text
    on), as ``sources.parse_file`` splits them."""
    started = False
    if fmt == "tsv":  # no quoting: stray quotes in reviews would pair across lines
        for n, line in _lines(path, whole):
            started = (started and blanks) or bool(line.strip())
            if started:
                yield n, line.split("\t")
        return
    numbered = _lines(path, whole)
    reader = csv.reader(line + "\n" for _, line in numbered)
    start = 1
    try:
        for row in reader:
            started = (started and blanks) or any(field.strip() for field in row)
            if started:
                yield start, row
            start = reader.line_num + 1
    except csv.Error:
        whole()
        raise UserError(f"--input: {path}:{start}: not valid CSV") from None


def _parquet(path: str, size: int) -> Chunks:
    """The rows of a Parquet file as records, numbered from 1."""
    try:
        import pyarrow.parquet as pq

        total = pq.ParquetFile(path).metadata.num_rows
    except ImportError:
        raise UserError(f"--input: {path}: reading Parquet needs pyarrow; pip install pyarrow") from None
    except Exception as e:  # pyarrow raises several kinds; all mean the file is no readable Parquet
        raise UserError(f"--input: {path} cannot be read as Parquet ({type(e).__name__}: {e})") from None

    def read(skip: int) -> Iterator[Rows]:
        n = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=size):
            if n + batch.num_rows <= skip:
                n += batch.num_rows
                continue
            rows = batch.to_pylist()
            start = max(0, skip - n)
            yield [(n + i + 1, row) for i, row in enumerate(rows) if i >= start]
            n += batch.num_rows

    return Chunks(path, "parquet", total, read)


def _looks_like_conll(path: str) -> bool:
    """Whether the first 2,000 lines of a plain-text file look like CoNLL, as an NER reader sniffs them: then it is
    read whole, by the task's own reader."""
    from ernie_ft.ner.formats import detect_format

    lines = []
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        for line in f:
            lines.append(line.rstrip("\n"))
            if len(lines) == 2000:
                break
    return detect_format(lines) == "conll"

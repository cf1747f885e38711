"""Where records come from: users' files (TSV, CSV, Excel, JSON Lines, plain text, annotation tools' exports, a
``datasets`` directory) opened, decoded and sniffed into rows, and records in memory checked.

Every mistake in a file becomes one `UserError` naming the flag, the file and, where it applies,
the line (`path:LINE:`), saying what is wrong and what to do about it. ``readers`` turns the rows into `Example`s.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass

from ernie_ft.data import annotations, tables
from ernie_ft.data.loading_line import count
from ernie_ft.errors import UserError

KNOWN_COLUMNS = ("text_a", "text", "text_b", "label", "sentence", "sentence1", "sentence2", "query", "title",
                 "content", "review")  # fmt: skip
_FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".jsonlines": "jsonl", ".txt": "lines"}
# Characters frequent in both simplified and traditional Chinese: the right legacy decoding of a
# file hits them often, the wrong one (GBK bytes read as Big5 or back) almost never.
_COMMON_HANZI = set("的是不了在人有我他这這个個们們中大上来來好也就都很说說会會没沒")


@dataclass(frozen=True)
class Location:
    """Where a record is, for messages: a line of a file (``--test: a.jsonl:3``), or an item of records in
    memory (``inputs[2]``), whose messages name the field they are about (``inputs[2].text``)."""

    record: str
    in_memory: bool = False

    @classmethod
    def item(cls, flag: str, index: int) -> Location:
        """The ``index``-th (from 0) of the records in memory given as ``flag``."""
        return cls(f"{flag}[{index}]", True)

    def field(self, name: str) -> str:
        """Where the record's field ``name`` is: the file's line, or ``inputs[2].name`` in memory."""
        return f"{self.record}.{name}" if self.in_memory else self.record


def column_key(name) -> str:
    """How a column's name is compared with the names given for it: case aside, and any run of white space
    (a non-breaking space from a spreadsheet, an ideographic space, a line break in an Excel header cell) as one
    space, none at the ends; ``Question\u00a0Sentence`` is found as ``--text-column "question sentence"``."""
    return " ".join(str(name).split()).casefold()


def check_records(records: list, flag: str, record: str = '{"text": "..."}') -> list[tuple[int, dict]]:
    """[(line number, record), ...] for records in memory, numbered as the lines of a JSON Lines file of them
    (from 1), as ``parse_jsonl`` gives them; no record, or one that is not an object, raises UserError naming
    it (``inputs[2]``). ``record`` shows what one should hold."""
    if not records:
        raise UserError(f"{flag}: no records; give at least one such as {record}")
    for i, value in enumerate(records):
        if not isinstance(value, dict):
            raise UserError(
                f"{flag}[{i}]: expected a JSON object such as {record}, found "
                f"{json.dumps(value, ensure_ascii=False, default=str)[:40]}"
            )
    return list(enumerate(records, 1))


def read_text_file(path: str, flag: str = "--train") -> str:
    """Return the whole file at `path` as str with "\\n" line endings.

    Accepts UTF-8 (a BOM is dropped) and UTF-16 with a BOM. A missing file, a directory, an empty
    file or another encoding raises UserError; for GBK/GB18030 or Big5 the message gives the iconv
    command that converts it. `flag` is the command-line flag the path came from.
    """
    where = f"{flag}: {path}"
    if not os.path.exists(path):
        raise UserError(f"{where} not found; check the path (relative paths start at {os.getcwd()})")
    if os.path.isdir(path):
        raise UserError(
            f"{where} is a directory; give the path of a data file inside it (a directory "
            "is read only when datasets' save_to_disk wrote it)"
        )
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise UserError(f"{where} cannot be read: {e.strerror}") from None
    utf16 = raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    if b"\x00" in raw and not utf16:
        line = raw.count(b"\n", 0, raw.index(b"\x00")) + 1
        raise UserError(
            f"{where}:{line}: contains NUL bytes, so it is binary or UTF-16 without a "
            "byte-order mark; save it as UTF-8 text"
        )
    try:
        text = raw.decode("utf-16" if utf16 else "utf-8-sig").replace("\r\n", "\n")
    except UnicodeDecodeError as e:
        if utf16:
            raise UserError(f"{where} starts like UTF-16 but is damaged; save it as UTF-8") from None
        raise UserError(encoding_message(where, path, raw, e.start)) from None
    if not text.strip():
        raise UserError(f"{where} is empty; it needs one record per line")
    return text


def encoding_message(where: str, path: str, raw: bytes, offset: int, first_line: int = 1) -> str:
    """What is wrong with bytes that are not UTF-8 (``raw`` starts at line ``first_line`` of ``path``)
    and the iconv command that converts the file when it looks like GBK or Big5."""
    line = raw.count(b"\n", 0, offset) + first_line
    scores = {}
    for name, codec in (("GBK/GB18030", "GB18030"), ("Big5", "BIG5")):
        try:
            scores[(name, codec)] = sum(ch in _COMMON_HANZI for ch in raw.decode(codec))
        except UnicodeDecodeError:
            pass
    head = f"{where}:{line}: not UTF-8 (first bad byte at offset {offset})"
    if not scores:
        return f"{head}, nor GBK or Big5; save it as UTF-8 (or a character on this line is damaged)"
    name, codec = max(scores, key=scores.get)  # ties keep GBK, the common case in mainland data
    stem, ext = os.path.splitext(path)
    command = f"iconv -f {codec} -t UTF-8 {_quote(path)} > {_quote(stem + '.utf8' + ext)}"
    return f"{head}; it looks like {name}. Convert it to UTF-8 with: {command}"


def _quote(s: str) -> str:
    """`s` in single quotes for a shell command the user can paste."""
    return "'" + s.replace("'", "'\\''") + "'"


def read_records(
    path: str,
    flag: str = "--train",
    *,
    header_names: Iterable[str] = (),
    header: bool | None = None,
    sheet: str | None = None,
) -> tuple[list[str], list[tuple[int, dict]]]:
    """Return (columns, [(line_number, {column: value}), ...]) for a TSV, CSV, Excel or JSONL file.

    The format comes from the extension, else from the first line ('{' -> JSONL, a tab -> TSV,
    else CSV). A .txt file is one text per line (column "text") unless its first line holds a
    tab, then TSV. A TSV/CSV/Excel first row is a header when it holds a KNOWN_COLUMNS name or one of
    `header_names`, or when its content says so (``tables.looks_like_header``); ``header`` True or False
    decides instead. Without a header, columns are named "0", "1", ... An .xlsx workbook's first sheet
    (or ``sheet``) is read as pandas reads it; line numbers are its row numbers. JSONL columns are every
    record's keys (a text pair's key may be on some records only); doccano JSONL and Label Studio JSON
    exports become {"text", "label": [names]} records (``annotations``). Blank lines are skipped; line
    numbers are 1-based record starts. A directory
    written by ``datasets``' ``save_to_disk`` is read with ``datasets`` (line numbers are row numbers).
    """
    columns, rows, _, _ = parse_file(path, flag, header_names, header=header, sheet=sheet, labelled=False)
    return columns, rows


def parse_file(
    path: str,
    flag: str,
    header_names: Iterable[str] = (),
    *,
    header=None,
    sheet=None,
    labelled=True,
    key=None,
    predictions_as_labels=False,
    separator=None,
    pair_key=None,
):
    """read_records plus the layout ("header", "detected" (a header found by its content), "positional" (no
    header line) or "lines" (.txt)) and what the loading line says of the file ("" for plain JSONL and .txt).
    ``key``: the key of a Label Studio task's data that holds the text. ``predictions_as_labels``: a Label Studio
    task without an annotation is labelled by its predictions (``--predictions-as-labels``); ``pair_key``: the key
    of its data that holds a sentence pair's second text. ``separator``: what joins
    the nodes of a Label Studio Taxonomy label path (``--hierarchy-separator``)."""
    where = f"{flag}: {path}"
    if os.path.isdir(path) and _is_saved_dataset(path):
        return (*_saved_dataset(where, path), "header", "")
    kind = tables.binary_kind(path) if os.path.isfile(path) else None
    if kind is not None:
        return _name_fields(where, "Excel", tables.excel_rows(path, where, sheet), header_names, header)
    text = read_text_file(path, flag)
    export = annotations.load(text, where, key, predictions_as_labels, pair_key)
    if export is not None:
        columns, rows = annotations.classification_rows(export, where, labelled, separator)
        return columns, rows, "header", export.summary
    lines = text.split("\n")  # not splitlines(): that also splits on \x1c, \u2028 and lone \r
    first = next(line for line in lines if line.strip())
    fmt = _FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt == "lines" and "\t" in first:  # .txt with tabs is how LCQMC-style corpora ship
        fmt = "tsv"
    elif fmt is None:
        fmt = "jsonl" if first.lstrip().startswith("{") else "tsv" if "\t" in first else "csv"
    if fmt == "jsonl":
        return (*parse_jsonl(where, path, lines), "header", "")
    if fmt == "lines":
        return ["text"], [(n, {"text": s}) for n, s in enumerate(lines, 1) if s.strip()], "lines", ""
    # TSV has no quoting: Chinese reviews contain stray quotes that csv would pair across lines.
    rows = [(n, s.split("\t")) for n, s in enumerate(lines, 1) if s.strip()] if fmt == "tsv" else _csv_rows(where, text)
    if not rows:  # e.g. a CSV of separators and quotes only: every row is empty fields
        raise UserError(
            f"{where} has no row with any text (only separators, quotes or blank fields); "
            "give a file with a text in each row"
        )
    return _name_fields(where, fmt.upper(), rows, header_names, header)


def _is_saved_dataset(path: str) -> bool:
    return any(os.path.isfile(os.path.join(path, name)) for name in ("state.json", "dataset_dict.json"))


def _saved_dataset(where: str, path: str) -> tuple[list[str], list[tuple[int, dict]]]:
    """(columns, [(row number, record), ...]) of a directory written by ``datasets``' ``save_to_disk``."""
    import datasets

    if os.path.isfile(os.path.join(path, "dataset_dict.json")):
        splits = sorted(entry.name for entry in os.scandir(path) if entry.is_dir())
        raise UserError(
            f"{where} holds the splits {', '.join(splits)} of a datasets DatasetDict; give one "
            f"split's directory, e.g. {os.path.join(path, splits[0] if splits else 'train')}"
        )
    try:
        dataset = datasets.load_from_disk(path, keep_in_memory=False)
    except Exception as e:  # datasets raises many kinds; all mean the directory is not a readable dataset
        raise UserError(
            f"{where} looks like a directory written by datasets' save_to_disk but cannot be "
            f"loaded ({type(e).__name__}: {e}); write it again with Dataset.save_to_disk"
        ) from None
    if len(dataset) == 0:
        raise UserError(f"{where} is an empty dataset; it needs at least one row")
    return list(dataset.column_names), list(enumerate(dataset.to_list(), 1))


def _csv_rows(where: str, text: str) -> list[tuple[int, list[str]]]:
    reader = csv.reader(io.StringIO(text))
    rows, start = [], 1
    try:
        for row in reader:
            if any(field.strip() for field in row):
                rows.append((start, row))
            start = reader.line_num + 1
    except csv.Error as e:
        raise UserError(
            f"{where}:{start}: {e}; look for an unclosed double quote (a quote inside a "
            'quoted text is written twice: "she said ""hi""")'
        ) from None
    return rows


def _name_fields(where: str, fmt: str, rows: list, header_names: Iterable[str], header: bool | None = None):
    """(columns, records, layout, the loading line's words) of a table's rows [(line, fields), ...]."""
    first_line, first = rows[0][0], [field.strip() for field in rows[0][1]]
    known = {column_key(name) for name in (*KNOWN_COLUMNS, *header_names)}
    by_name = any(column_key(field) in known for field in first)
    headerless = not (by_name or tables.looks_like_header(rows)) if header is None else not header
    columns, body = ([str(i) for i in range(len(first))], rows) if headerless else (first, rows[1:])
    twice = next((c for c in columns if columns.count(c) > 1), None)
    if twice is not None:  # a dict would keep only the last of them, silently
        raise UserError(
            f'{where}:{first_line}: column "{twice}" appears twice in the header; give each column its own name'
        )
    records = []
    for n, fields in body:
        if len(fields) != len(columns):
            raise UserError(_field_count_message(where, fmt, n, fields, columns, headerless, first_line))
        records.append((n, dict(zip(columns, fields))))
    layout = "positional" if headerless else "header" if by_name else "detected"
    if layout == "header" and header is None and fmt != "Excel":  # a header of known names goes without saying
        return columns, records, layout, ""
    summary = tables.header_summary(first_line, first, not headerless, header)
    return columns, records, layout, f"{fmt}, {count(records, 'row')}, {summary}"


def _field_count_message(where, fmt, n, fields, columns, headerless, first_line) -> str:
    shape = f"like line {first_line}" if headerless else f"({', '.join(columns)})"
    if fmt == "CSV" and any("\n" in field for field in fields):
        hint = "this record runs over several lines, so a double quote is probably left open"
    elif len(fields) > len(columns):
        hint = (
            "a tab inside the text splits it, so replace tabs in the text with spaces"
            if fmt == "TSV"
            else 'a comma inside the text must be quoted: "good price, fast delivery"'
        )
    else:
        hint = f"separate the fields with a {'tab (spaces do not count)' if fmt == 'TSV' else 'comma'}"
    return f"{where}:{n}: expected {len(columns)} fields {shape}, found {len(fields)}; {hint}"


def parse_jsonl(where: str, path: str, lines: list[str], record: str = '{"text": "...", "label": "..."}'):
    """Return (every record's keys, in order of first appearance, [(line_number, object), ...]) for the JSON
    Lines in `lines`.

    `where` ("FLAG: PATH") starts every message; `record` shows what one line should hold. Blank
    lines are skipped; pretty-printed JSON or an array, a line that is not valid JSON or not an
    object raise UserError with the line (and column), saying how to fix it.
    """
    records = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if (not records and line.lstrip().startswith("[")) or line.strip() in ("{", "}"):
            query = "'.[]'" if line.lstrip().startswith("[") else "."
            out = _quote(os.path.splitext(path)[0] + ".jsonl")
            raise UserError(
                f"{where}:{n}: this is pretty-printed JSON or a JSON array; ernie_ft reads JSON "
                f"Lines, one object per line. Convert with: jq -c {query} {_quote(path)} > {out}"
            )
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            last = not any(rest.strip() for rest in lines[n:])
            if last and annotations.ends_mid_value(line, e):  # cut off while written, copied or downloaded
                raise annotations.truncated("\n".join(lines), where, "inside its last line's JSON object") from None
            raise UserError(
                f"{where}:{n}:{e.colno}: invalid JSON ({e.msg}); each line must be one complete object such as {record}"
            ) from None
        if not isinstance(value, dict):
            raise UserError(
                f"{where}:{n}: expected a JSON object such as {record}, "
                f"found {json.dumps(value, ensure_ascii=False)[:40]}"
            )
        records.append((n, value))
    return record_keys(records), records


def record_keys(records: list[tuple[int, dict]]) -> list[str]:
    """The columns of JSON records: every key some record has, in order of first appearance (a text pair's
    field may be on some records only)."""
    return list(dict.fromkeys(key for _, record in records for key in record))

"""Read users' labelled files (TSV, CSV, JSON Lines, plain text) into `Example`s.

Every mistake in a file becomes one `UserError` naming the flag, the file and, where it applies,
the line (`path:LINE:`), saying what is wrong and what to do about it.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ernie_ft.data import annotations, tables
from ernie_ft.errors import UserError

KNOWN_COLUMNS = ("text_a", "text", "text_b", "label", "sentence", "sentence1", "sentence2", "query", "title", "content")
TEXT_COLUMNS = ("text_a", "text", "sentence", "sentence1", "content")
PAIR_COLUMNS = ("text_b", "text_pair", "sentence2")  # text_pair: the field serve and HF pipelines name
_FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".jsonlines": "jsonl", ".txt": "lines"}
# Characters frequent in both simplified and traditional Chinese: the right legacy decoding of a
# file hits them often, the wrong one (GBK bytes read as Big5 or back) almost never.
_COMMON_HANZI = set("的是不了在人有我他这這个個们們中大上来來好也就都很说說会會没沒")


class TrainedColumn(str):
    """A column setting saved by the training run, given to ``read_examples`` at prediction time.

    It fits the training file, not necessarily this one: it names the column only in a file
    that has it (see ``read_examples``), where a plain string must be found.
    """


@dataclass(frozen=True)
class Example:
    """One text (or text pair) with its label, and where it came from for later error messages."""

    text: str
    text_pair: str | None
    label: str | tuple[str, ...] | None
    """A string, or a tuple of labels where the file gives a JSON list (``classify --multi-label``: label sets)."""
    line: int
    source: str


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
    columns, rows, _, _ = _parse(path, flag, header_names, header=header, sheet=sheet, labelled=False)
    return columns, rows


def _parse(path: str, flag: str, header_names: Iterable[str] = (), *, header=None, sheet=None, labelled=True, key=None):
    """read_records plus the layout ("header", "detected" (a header found by its content), "positional" (no
    header line) or "lines" (.txt)) and what the loading line says of the file ("" for plain JSONL and .txt).
    ``key``: the key of a Label Studio task's data that holds the text."""
    where = f"{flag}: {path}"
    if os.path.isdir(path) and _is_saved_dataset(path):
        return (*_saved_dataset(where, path), "header", "")
    kind = tables.binary_kind(path) if os.path.isfile(path) else None
    if kind is not None:
        return _name_fields(where, "Excel", tables.excel_rows(path, where, sheet), header_names, header)
    text = read_text_file(path, flag)
    export = annotations.load(text, where, key)
    if export is not None:
        columns, rows = annotations.classification_rows(export, where, labelled)
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
    known = {name.lower() for name in (*KNOWN_COLUMNS, *header_names)}
    by_name = any(field.lower() in known for field in first)
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
    return columns, records, layout, f"{fmt}, {len(records)} row{'s' * (len(records) != 1)}, {summary}"


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


def default_column(columns: list[str], names: tuple) -> str | None:
    """The first of ``names`` (lower case) among ``columns``, spelt as the file spells it; None if none is."""
    lowered = {c.lower(): c for c in columns}
    return next((lowered[c] for c in names if c in lowered), None)


def read_examples(
    path: str,
    *,
    text_column: str | None = None,
    pair_column: str | None = None,
    label_column: str | None = "label",
    require_label: bool = True,
    flag: str = "--train",
    check: Callable[[Example, str], None] | None = None,
    header: bool | None = None,
    sheet: str | None = None,
) -> list[Example]:
    """Return the Examples in a TSV/CSV/Excel/JSONL file (doccano and Label Studio exports included), or in a
    .txt file of one text per line. ``header``/``sheet``: as ``read_records`` takes them.

    Columns are names or 0-based position strings. Defaults: text = first of TEXT_COLUMNS present,
    pair = text_b or sentence2 if present, label = "label" (None means the same). A headerless
    file's label is its first or last column, whichever has fewer distinct values (tie: last),
    and the rest are text then pair; with require_label=False it is text[, pair]. Labels come back
    as stripped strings (JSON 1 and 1.0 -> "1", true -> "true"), a JSON list as a tuple of them,
    or None when not required and absent. Any problem raises UserError with the line.

    A column given as ``TrainedColumn`` (prediction reusing the training run's settings) applies
    only where it fits: a name in a file with such a column, positions in a headerless file that
    has all of them, never in a .txt file; elsewhere the defaults apply.

    ``check(example, where)``, when given, is called on every example once all are read, ``where`` being the
    place of its text for a message (``--input: a.jsonl:3``); it raises UserError for a text the caller refuses.

    A table whose header was found by its content, set by ``header`` or missing, an Excel sheet and an annotation
    tool's export get a loading line on stderr once read: the format, the header (or none), how many records.
    """
    named = [c for c in (text_column, pair_column, label_column) if c and not str(c).isdigit()]
    key = str(text_column) if text_column and not str(text_column).isdigit() else None
    columns, rows, layout, summary = _parse(
        path, flag, named, header=header, sheet=sheet, labelled=require_label, key=key
    )
    where = f"{flag}: {path}"
    given = (text_column, pair_column, label_column)

    def locate(line: int) -> Location:
        return Location(f"{where}:{line}")

    examples = _examples(where, path, columns, rows, layout, given, require_label, locate, check)
    if summary:  # the loading line, for what the reader had to find out: the header, the tool, the sheet
        print(f"{where}: {summary}", file=sys.stderr)
    return examples


def record_examples(
    records: list,
    *,
    text_column: str | None = None,
    pair_column: str | None = None,
    label_column: str | None = "label",
    require_label: bool = False,
    flag: str = "inputs",
    check: Callable[[Example, str], None] | None = None,
    header: bool | None = None,
    sheet: str | None = None,
) -> list[Example]:
    """The Examples ``read_examples`` gives for a JSON Lines file of ``records`` (dicts in memory, e.g. a
    served request's inputs): the same texts, labels and line numbers (from 1), with ``flag`` as their source.
    ``header`` and ``sheet`` are for tables and files: records in memory have neither (taken so that callers
    pass one set of reading settings to both).

    A bad field raises UserError naming it (``inputs[2].text: ...``); as in a JSON Lines file the columns are
    the records' keys (``record_keys``), so what concerns the columns names ``inputs[0]``.
    """
    rows = check_records(records, flag)
    given = (text_column, pair_column, label_column)

    def locate(line: int) -> Location:
        return Location.item(flag, line - 1)

    return _examples(f"{flag}[0]", flag, record_keys(rows), rows, "header", given, require_label, locate, check)


def _examples(where, source, columns, rows, layout, given, require_label, locate, check) -> list[Example]:
    """The Examples of parsed ``rows`` (see ``read_examples``); ``locate(line)`` is a row's Location."""
    text_column, pair_column, label_column = _fitting(given, columns, layout)
    text_note, label_note = _unfit_note(given[0], text_column), _unfit_note(given[2], label_column)
    headerless = layout == "positional"
    if layout == "lines" and require_label:
        raise UserError(
            f"{where} is plain text (one text per line, no labels) but labels are needed "
            "here; use a TSV, CSV or JSONL file with a label column"
        )
    if not rows:
        raise UserError(f"{where} has no records, only a header line; add one record per line")
    label_column = label_column or "label"
    text = _column(where, columns, text_column, "--text-column", headerless)
    pair = _column(where, columns, pair_column, "--text-pair-column", headerless)
    # In a headerless file the default "label" means "find it by its values"; missing labels are
    # only an error when they are needed, so prediction can read the same files without them.
    label = _column(
        where,
        columns,
        None if headerless and label_column == "label" else label_column,
        "--label-column",
        headerless,
        must_exist=require_label and label_column != "label",
    )
    unnamed = layout == "detected" and text is None and label is None and default_column(columns, TEXT_COLUMNS) is None
    if headerless or unnamed:  # a header of other names (评论, 情感): the roles by content, as without one
        # ... and a named end column of repeated values is the label even where none is needed (prediction)
        ends = {columns[0], columns[-1]} if unnamed and len(columns) > 1 else set()
        labelled = require_label or any(len({r.get(c) for _, r in rows}) < len(rows) for c in ends)
        text, pair, label = _headerless_roles(where, columns, rows, text, pair, label, labelled)
    else:
        text = text or default_column(columns, TEXT_COLUMNS)
        if pair_column is None:
            pair = default_column(columns, PAIR_COLUMNS)
        if text is None:
            raise UserError(
                f"{where} has no text column{text_note}; columns found: "
                f"{', '.join(columns)}. Name the text column with --text-column"
            )
        if label is None and require_label:
            raise UserError(
                f'{where} has no "{label_column}" column{label_note}; columns '
                f"found: {', '.join(columns)}. Name the label column with --label-column"
            )
    examples, places = [], []
    for n, record in rows:
        places.append(locate(n))
        examples.append(_example(places[-1], n, source, record, text, pair, label, require_label))
    if check is not None:
        for example, at in zip(examples, places):
            check(example, at.field(text))
    return examples


def _example(at: Location, line: int, source: str, record: dict, text, pair, label, require_label) -> Example:
    """One record's Example: its ``text`` and ``pair`` columns' texts and its ``label`` column's label."""
    text_value = _text(at, record, text)
    # a JSON record without the pair's key is a single text (a TSV or CSV row has every column)
    pair_value = _text(at, record, pair) if pair is not None and pair in record else None
    label_value = _label(at, record, label) if label is not None else ""
    if require_label and not label_value:
        raise UserError(f'{at.field(label)}: empty label in column "{label}"; every record needs a label')
    return Example(text_value, pair_value, label_value or None, line, source)


def _fitting(given: tuple, columns: list[str], layout: str) -> tuple:
    """``given`` with every TrainedColumn that does not fit this file replaced by None (the default)."""
    lowered = {c.lower() for c in columns}
    positions = [c for c in given if isinstance(c, TrainedColumn) and c.isdigit()]
    # Positions describe the training file's layout: they carry over to a headerless file with all
    # of them (one without the label column would shift its text into the label's place).
    positions_fit = layout == "positional" and all(int(c) < len(columns) for c in positions)

    def fit(column):
        if not isinstance(column, TrainedColumn):
            return column
        if column.isdigit():
            return str(column) if positions_fit else None
        return str(column) if layout in ("header", "detected") and column.lower() in lowered else None

    return tuple(fit(column) for column in given)


def _unfit_note(given: str | None, fitted: str | None) -> str:
    """For messages: the training run's column this file lacks, when the default looked for instead is another."""
    if given is None or fitted is not None or given.lower() == "label":
        return ""
    return f' (the model was trained on column "{given}")'


def _column(where, columns, given, option, headerless, must_exist=True) -> str | None:
    """The column in `columns` that `given` (a name, any case, or a 0-based position) names."""
    if given is None:
        return None
    lowered = {c.lower(): c for c in columns}
    if str(given).lower() in lowered:
        return lowered[str(given).lower()]
    if str(given).isdigit() and int(given) < len(columns):
        return columns[int(given)]
    if not must_exist:
        return None
    numbered = " (no header line, so they are numbered from 0)" if headerless else ""
    raise UserError(f'{option} "{given}" not found in {where}; columns found: {", ".join(columns)}{numbered}')


def _headerless_roles(where, columns, rows, text, pair, label, require_label):
    free = [c for c in columns if c not in (text, pair, label)]
    if label is None and free and (require_label or len(free) - (text is None) - (pair is None) > 0):
        ends = [c for c in (columns[0], columns[-1]) if c in free]
        label = min(reversed(ends), key=lambda c: len({str(r.get(c)).strip() for _, r in rows}))
        free.remove(label)
    if text is None and free:
        text = free.pop(0)
    if pair is None and free:
        pair = free.pop(0)
    if text is None or free or (require_label and label is None):
        count = f"{len(columns)} column{'s' * (len(columns) != 1)}"
        if columns != [str(i) for i in range(len(columns))]:  # a header of names the reader does not know
            shape, fix = f"the columns {', '.join(columns)}", "name them with --text-column and --label-column"
        else:
            shape = f"no header line and {count}"
            fix = "add a header line naming the columns, e.g. text_a, text_b, label"
        raise UserError(f"{where} has {shape}, which does not fit text[, text pair] and a label; {fix}")
    return text, pair, label


def _text(at: Location, record: dict, column: str) -> str:
    value = record.get(column)
    if isinstance(value, (list, dict)):
        raise UserError(f'{at.field(column)}: column "{column}" holds a JSON {type(value).__name__}; expected text')
    value = "" if value is None else str(value).strip()
    if not value:
        raise UserError(f'{at.field(column)}: empty text in column "{column}"; fill it in or delete the line')
    return value


def _label(at: Location, record: dict, column: str) -> str | tuple[str, ...]:
    """A record's label as a stripped string, or a tuple of them for a JSON list (several labels; the task
    decides whether it takes them); a JSON object, or a list holding one, raises UserError."""
    value = record.get(column)
    if isinstance(value, bool):
        return "true" if value else "false"  # as written in the file, not Python's "True"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict) or isinstance(value, list) and any(isinstance(v, (list, dict)) for v in value):
        raise UserError(
            f'{at.field(column)}: label in column "{column}" is a JSON {"object" if isinstance(value, dict) else ""}'
            f"{'' if isinstance(value, dict) else 'list holding lists or objects'}; expected a string or a list of "
            'strings, e.g. "label": ["体育", "娱乐"]'
        )
    if isinstance(value, list):  # several labels (classify --multi-label); empty items dropped
        return tuple(label for label in (_label(at, {column: v}, column) for v in value) if label)
    return "" if value is None else str(value).strip()

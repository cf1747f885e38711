"""Read users' labelled files (TSV, CSV, JSON Lines, plain text; opened by ``sources``) into `Example`s.

Every mistake in a file becomes one `UserError` naming the flag, the file and, where it applies,
the line (`path:LINE:`), saying what is wrong and what to do about it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from ernie_ft.data import tables
from ernie_ft.data.loading_line import count
from ernie_ft.data.sources import Location, check_records, column_key, parse_file, record_keys
from ernie_ft.errors import UserError

TEXT_COLUMNS = ("text_a", "text", "sentence", "sentence1", "content", "review")
PAIR_COLUMNS = ("text_b", "text_pair", "sentence2")  # text_pair: the field serve and HF pipelines name
LABEL_SET_COLUMNS = ("label", "labels")
"""Where label sets are looked for by default (``label_sets``): a file has one of them or names its column."""


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


def default_column(columns: list[str], names: tuple) -> str | None:
    """The first of ``names`` (lower case) among ``columns``, spelt as the file spells it; None if none is."""
    lowered = {column_key(c): c for c in columns}
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
    label_sets: bool = False,
    label_columns: tuple[str, ...] = (),
    predictions_as_labels: bool = False,
    hierarchy_separator: str | None = None,
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
    Column names match whatever their case and white space (``sources.column_key``). When the columns are not
    found on an Excel workbook's sheet, the message names its sheets, the one that has them and ``--sheet``.

    ``label_sets`` (``classify --multi-label``): the label column is ``label`` or, in a file without one,
    ``labels`` (``LABEL_SET_COLUMNS``; both: an error). ``label_columns``: the 0/1 columns that hold the labels
    (``--label-columns``, named as this file names them): no label column is read, these never hold the text
    or the pair, and messages on the labels name ``--label-columns``. ``hierarchy_separator`` joins the nodes of a
    Label Studio Taxonomy label path (``--hierarchy-separator``).
    """
    extra = (*LABEL_SET_COLUMNS, *label_columns) if label_sets else label_columns
    named = [c for c in (text_column, pair_column, label_column, *extra) if c and not str(c).isdigit()]
    key = str(text_column) if text_column and not str(text_column).isdigit() else None
    pair_key = str(pair_column) if pair_column and not str(pair_column).isdigit() else None
    where = f"{flag}: {path}"
    given = (text_column, pair_column, label_column)
    labels = (label_sets, tuple(label_columns))

    def read(sheet: str | None) -> tuple[list[Example], str]:
        columns, rows, layout, summary = parse_file(
            path,
            flag,
            named,
            header=header,
            sheet=sheet,
            labelled=require_label,
            key=key,
            predictions_as_labels=predictions_as_labels,
            separator=hierarchy_separator,
            pair_key=pair_key,
        )

        def locate(line: int) -> Location:
            return Location(f"{where}:{line}")

        return _examples(where, path, columns, rows, layout, given, require_label, locate, check, labels), summary

    try:
        examples, summary = read(sheet)
    except UserError as e:
        raise tables.with_sheets(e, path, sheet, read) from None
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


def _examples(
    where, source, columns, rows, layout, given, require_label, locate, check, labels=(False, ())
) -> list[Example]:
    """The Examples of parsed ``rows`` (see ``read_examples``); ``locate(line)`` is a row's Location; ``labels``:
    ``(label_sets, label_columns)``."""
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
    text = _column(where, columns, text_column, "--text-column", headerless)
    pair = _column(where, columns, pair_column, "--text-pair-column", headerless)
    if labels[1]:
        return _from_label_columns(where, source, columns, rows, text, pair, pair_column, labels[1], locate, check)
    label_column = _label_set_column(where, columns, label_column) if labels[0] and not headerless else label_column
    label_column = label_column or "label"
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
                f"found: {', '.join(columns)}. Name the label column with --label-column{_one_hot(columns, rows)}"
            )
    return _build(source, rows, text, pair, label, require_label, locate, check)


def _one_hot(columns: list[str], rows: list) -> str:
    """The hint for a file without a label column whose labels are 0/1 columns, one per label (at least two):
    ``--multi-label --label-columns`` with their common prefix as a pattern, or their names; else ""."""
    binary = [c for c in columns if all(str(r.get(c, "")).strip() in ("0", "1") for _, r in rows)]
    if len(binary) < 2:
        return ""
    prefix = os.path.commonprefix(binary)
    spec = f"{prefix}*" if prefix and all(c in binary for c in columns if c.startswith(prefix)) else ",".join(binary)
    return f"; or, as its columns {', '.join(binary[:4])} hold 0/1 labels: --multi-label --label-columns '{spec}'"


def _build(source, rows, text, pair, label, require_label, locate, check) -> list[Example]:
    """Every row's Example, then ``check`` on each (see ``read_examples``)."""
    examples, places = [], []
    for n, record in rows:
        places.append(locate(n))
        examples.append(_example(places[-1], n, source, record, text, pair, label, require_label))
    if check is not None:
        for example, at in zip(examples, places):
            check(example, at.field(text))
    return examples


def _from_label_columns(where, source, columns, rows, text, pair, pair_column, label_columns, locate, check):
    """The Examples of a file whose labels are 0/1 columns (``label_columns``, read by the caller): the text and
    the pair are found among the other columns, never guessed among several."""
    others = [c for c in columns if c not in label_columns]
    text = text or default_column(others, TEXT_COLUMNS)
    if pair_column is None:
        pair = default_column(others, PAIR_COLUMNS)
    if text is None:
        rest = [c for c in others if c != pair]
        if len(rest) != 1:
            found = ", ".join(rest) if rest else "none"
            raise UserError(
                f"{where}: which column holds the text? Besides the label columns of --label-columns "
                f"({', '.join(label_columns)}) it has: {found}. Name it with --text-column"
            )
        text = rest[0]
    return _build(source, rows, text, pair, None, False, locate, check)


def _label_set_column(where: str, columns: list[str], label_column: str | None) -> str | None:
    """The default label column of label sets: ``label``, or ``labels`` in a file without ``label``; a file with
    both must say which (``--label-column``). A label column named otherwise stays."""
    if label_column not in (None, "label"):
        return label_column
    present = [c for c in columns if column_key(c) in LABEL_SET_COLUMNS]
    if len(present) > 1:
        raise UserError(
            f'{where} has both a "{present[0]}" and a "{present[1]}" column; name the one that holds the labels '
            f"with --label-column"
        )
    return present[0] if present else label_column


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
    lowered = {column_key(c) for c in columns}
    positions = [c for c in given if isinstance(c, TrainedColumn) and c.isdigit()]
    # Positions describe the training file's layout: they carry over to a headerless file with all
    # of them (one without the label column would shift its text into the label's place).
    positions_fit = layout == "positional" and all(int(c) < len(columns) for c in positions)

    def fit(column):
        if not isinstance(column, TrainedColumn):
            return column
        if column.isdigit():
            return str(column) if positions_fit else None
        return str(column) if layout in ("header", "detected") and column_key(column) in lowered else None

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
    lowered = {column_key(c): c for c in columns}
    if column_key(given) in lowered:
        return lowered[column_key(given)]
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
        columns_read = count(columns, "column")
        if columns != [str(i) for i in range(len(columns))]:  # a header of names the reader does not know
            shape, fix = f"the columns {', '.join(columns)}", "name them with --text-column and --label-column"
        else:
            shape = f"no header line and {columns_read}"
            fix = "add a header line naming the columns, e.g. text_a, text_b, label"
        raise UserError(f"{where} has {shape}, which does not fit text[, text pair] and a label; {fix}")
    return text, pair, label


def _text(at: Location, record: dict, column: str) -> str:
    if column not in record:  # a JSON record without the key (a table's row has every column)
        keys = ", ".join(record) or "none"
        raise UserError(
            f'{at.field(column)}: the text key "{column}" is missing (the record\'s keys: {keys}); give every record '
            f'its text as "{column}"'
        )
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

"""What ``predict`` keeps of an input record besides the task's answer to it: a record whose text is empty (a blank
line of a .txt, an empty field of a table, ``""`` or null in JSON Lines or Parquet) is answered in its place with
no prediction, so the output holds one answer per input record in input order; and every column of a record that
is not its text (an id, a timestamp) comes back beside its answer, so answers join back to the input by key."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from ernie_ft.data.readers import PAIR_COLUMNS, TEXT_COLUMNS, TrainedColumn, default_column
from ernie_ft.data.sources import column_key

INPUT_PREFIX = "input_"
"""An input column named as a field of the answer, or the label column (a gold ``label``), comes back under this
prefix (``input_label``), also beside a blank record's answer, which has no label of its own."""


class Blank(dict):
    """The answer to a record without a text: its fields, no prediction (an annotation tool's import writes it as a
    task without one, ``outputs.Converted``)."""


@dataclass(frozen=True)
class Fields:
    """How records are read for one model and its flags: the task's input fields and the column flags."""

    required: tuple
    optional: tuple
    text_column: Optional[str]
    pair_column: Optional[str]
    label_column: str

    @classmethod
    def of(cls, task, data) -> Fields:
        required, optional = task.input_fields
        label = str(data.label_column or "label")
        return cls(tuple(required), tuple(optional), data.text_column, data.text_pair_column, label)

    def columns(self, record: dict) -> tuple[Optional[str], Optional[str]]:
        """(the key holding ``record``'s text, the key holding its second text), as the task's reader finds them
        (the column flag, else the usual names); None where there is none."""
        keys = list(record)
        text = _column(keys, self.text_column, (*TEXT_COLUMNS, *self.required[:1]))
        pair = _column(keys, self.pair_column, (*PAIR_COLUMNS, *self.optional[:1]))
        return text, pair

    def is_blank(self, record: dict) -> bool:
        """Whether ``record`` has no text to answer: its text column is empty, or it has no value at all (a blank
        line)."""
        text, _ = self.columns(record)
        if text is not None:
            return _empty(record[text])
        return all(_empty(value) for value in record.values())

    def blank_answer(self, record: dict) -> dict:
        """The answer to a blank record: its text as given ("" where it has none) and its other columns, no
        prediction."""
        text, pair = self.columns(record)
        answer = {self.required[0]: record[text] if text is not None and record[text] is not None else ""}
        if pair is not None and self.optional and not _empty(record[pair]):
            answer[self.optional[0]] = record[pair]
        return Blank(self.with_columns(answer, record))

    def with_columns(self, answer: dict, record: dict) -> dict:
        """``answer`` with ``record``'s columns that are not its text (``others``) after its fields, those named as a
        field of ``answer`` or as the label column prefixed (``INPUT_PREFIX``); a value JSON has no type for (a
        timestamp, a date) as its text."""
        merged, label = dict(answer), column_key(self.label_column)
        for key in self.others(record):
            taken = key in answer or column_key(key) == label
            merged[INPUT_PREFIX + key if taken else key] = _json_value(record[key])
        return merged

    def others(self, record: dict) -> list[str]:
        """The keys of ``record`` that are not a text the task reads: they come back beside its answer."""
        reads = {*self.columns(record), *self.required, *self.optional}
        return [key for key in record if key not in reads]


def _column(keys: list[str], given, names: tuple) -> Optional[str]:
    lowered = {column_key(k): k for k in keys}
    if given is not None and not str(given).isdigit():
        if column_key(given) in lowered:
            return lowered[column_key(given)]
        if not isinstance(given, TrainedColumn):
            return None  # a column flag this record lacks: the task's reader says so
    return default_column(keys, names)


def _empty(value) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _json_value(value):
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))

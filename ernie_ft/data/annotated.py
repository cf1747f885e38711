"""What an annotation tool's export becomes, whichever tool wrote it (``annotations.load``): one ``Annotated`` per
record or task in an ``Export``. ``count``, ``items`` and ``names`` are importable from here for the parsers that
still do; they live in ``loading_line`` and ``json_values``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ernie_ft.data.json_values import items, names
from ernie_ft.data.loading_line import count

__all__ = ["Annotated", "Export", "TaskLine", "count", "items", "names"]


class TaskLine(int):
    """The line a Label Studio task starts on, naming the task as well: a compact export holds every task on line 1,
    so a message that says where an example is (``f"{path}:{example.line}: ..."``) reads ``export.json:1: task 13:
    ...``. It is the line number in every other use (compared, sorted, counted, written to JSON)."""

    task: str

    def __new__(cls, line: int, task: Optional[str]):
        value = super().__new__(cls, line)
        value.task = task
        return value

    def __str__(self) -> str:
        return f"{int(self)}: task {self.task}"

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else format(int(self), spec)


@dataclass(frozen=True)
class Annotated:
    """One record (doccano) or task (Label Studio): ``line`` is where it starts in the file (of a task, a
    ``TaskLine``)."""

    line: int
    task: Optional[str]
    text: str
    labels: tuple = ()
    spans: tuple = ()
    relations: tuple = ()
    labelled: bool = True  # False: the record carries no annotation at all
    dangling: tuple = ()  # ids of Label Studio relations whose from_id or to_id names no labelled region
    untyped: tuple = ()  # ids of relations without a label (Label Studio "labels": [], doccano no "type"), not read
    text_pair: Optional[str] = None  # a sentence pair's second text (Label Studio: data under the pair's key)


@dataclass
class Export:
    """An annotation tool's file: its records and the sentence the loading line shows."""

    tool: str  # "doccano" or "Label Studio"
    records: list = field(default_factory=list)
    summary: str = ""
    text_key: str = "text"  # the key the text was under (Label Studio: of data), the column classify names it by
    predictions_only: int = 0  # Label Studio tasks read as unannotated whose predictions --predictions-as-labels takes
    pair_key: Optional[str] = None  # the key of a sentence pair's second text, the column classify names it by

    @property
    def has_spans(self) -> bool:
        return any(r.spans for r in self.records)

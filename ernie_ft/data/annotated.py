"""What an annotation tool's export becomes, whichever tool wrote it (``annotations.load``): one ``Annotated`` per
record or task in an ``Export``. ``count``, ``items`` and ``names`` are importable from here for the parsers that
still do; they live in ``loading_line`` and ``json_values``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ernie_ft.data.json_values import items, names
from ernie_ft.data.loading_line import count

__all__ = ["Annotated", "Export", "count", "items", "names"]


@dataclass(frozen=True)
class Annotated:
    """One record (doccano) or task (Label Studio): ``line`` is where it starts in the file."""

    line: int
    task: Optional[str]
    text: str
    labels: tuple = ()
    spans: tuple = ()
    relations: tuple = ()
    labelled: bool = True  # False: the record carries no annotation at all
    dangling: tuple = ()  # ids of Label Studio relations whose from_id or to_id names no labelled region
    untyped: tuple = ()  # ids of relations without a label (Label Studio "labels": [], doccano no "type"), not read


@dataclass
class Export:
    """An annotation tool's file: its records and the sentence the loading line shows."""

    tool: str  # "doccano" or "Label Studio"
    records: list = field(default_factory=list)
    summary: str = ""
    text_key: str = "text"  # the key the text was under (Label Studio: of data), the column classify names it by
    predictions_only: int = 0  # Label Studio tasks read as unannotated whose predictions --predictions-as-labels takes

    @property
    def has_spans(self) -> bool:
        return any(r.spans for r in self.records)

"""What an annotation tool's export becomes, whichever tool wrote it (``annotations.load``): one ``Annotated`` per
record or task in an ``Export``, and the small readers of loosely typed JSON values the parsers use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


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


def count(items, noun: str) -> str:
    """How many ``items`` (a list, or a number) there are, with the noun: "1 task", "3 tasks"."""
    n = items if isinstance(items, int) else len(items)
    return f"{n} {noun}{'s' * (n != 1)}"


def items(value) -> list:
    """A JSON list as it is; anything else (absent, null, an object) as no items."""
    return value if isinstance(value, list) else []


def names(value) -> list[str]:
    """Label names: a JSON list of strings (or numbers), or a single one."""
    return [str(v) for v in (value if isinstance(value, list) else [value]) if isinstance(v, (str, int)) and v != ""]

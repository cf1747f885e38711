"""How the line a reader prints after loading a file counts what it read ("240 rows", "1 task")."""

from __future__ import annotations


def count(items, noun: str) -> str:
    """How many ``items`` (a list, or a number) there are, with the noun: "1 task", "3 tasks"."""
    n = items if isinstance(items, int) else len(items)
    return f"{n} {noun}{'s' * (n != 1)}"

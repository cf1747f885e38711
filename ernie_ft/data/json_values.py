"""The loosely typed JSON values of annotation tools' exports, read as the parsers (``annotations``,
``label_studio``) need them: a list or nothing, label names."""

from __future__ import annotations


def items(value) -> list:
    """A JSON list as it is; anything else (absent, null, an object) as no items."""
    return value if isinstance(value, list) else []


def names(value) -> list[str]:
    """Label names: a JSON list of strings (or numbers), or a single one."""
    return [str(v) for v in (value if isinstance(value, list) else [value]) if isinstance(v, (str, int)) and v != ""]

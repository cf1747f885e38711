"""NER tag schemes (BIO, BIOES/BMES, IO): tags parsed, converted to character spans and back, and spans checked.

Every format becomes the same internal example: the text and its entities as character spans
``(start, end_exclusive, type)``; the schemes are converted at the edge, in ``tags_to_spans`` and ``spans_to_tags``.
"""

from __future__ import annotations

import re
from typing import Optional

from ernie_ft.errors import UserError

SCHEMES = ("bio", "bioes", "bmes", "io")
OVERLAPPING = ("error", "keep-longest")
# BILOU's L/U are BIOES's E/S; BMES's M is an inside tag.
PREFIXES = {"B": "B", "I": "I", "M": "I", "E": "E", "L": "E", "S": "S", "U": "S"}
TAG = re.compile(r"^(?:O|[BIMELSUbimelsu][-_]\S+)$")


def parse_tag(tag: str, where: str) -> tuple[str, Optional[str]]:
    """('O', None) or (prefix in B/I/E/S, type) for a tag such as B-PER, M-LOC, U_ORG or O."""
    if tag == "O":
        return "O", None
    if not TAG.match(tag):
        raise UserError(
            f"{where}: tag {tag!r} is not O or PREFIX-TYPE with a prefix from B, I, E, S, M, L, U "
            "(e.g. B-PER); check the separator between the token and its tag"
        )
    return PREFIXES[tag[0].upper()], tag[2:]


def detect_scheme(prefixes: set, raw: set = frozenset()) -> str:
    """The tag scheme a file uses, from the prefixes it contains (raw: the prefixes as written)."""
    if "M" in raw:
        return "bmes"
    if prefixes & {"E", "S"}:
        return "bioes"
    return "bio" if "B" in prefixes or not prefixes else "io"


def tags_to_spans(tags: list, scheme: str = "bio") -> tuple[list, list]:
    """Entity spans (start, end_exclusive, type) over positions, and the positions that broke the scheme.

    ``tags`` are (prefix, type) pairs from ``parse_tag``. Repair rule, the one conlleval uses:
    an I-/E- tag that does not continue an entity of its type starts a new entity there; under
    BIOES/BMES an entity left open (B- or I- not followed by I-/E- of its type) ends at its last
    tag. IO has no B, so I- after O or another type is how every entity starts, not an error.
    """
    closed_schemes = scheme in ("bioes", "bmes")
    spans, invalid, start, kind = [], [], None, None

    def close(end: int, proper: bool) -> None:
        nonlocal start, kind
        if start is not None:
            spans.append((start, end, kind))
            if closed_schemes and not proper:
                invalid.append(end - 1)
        start, kind = None, None

    for i, (prefix, type_) in enumerate(tags):
        if prefix in ("I", "E") and (start is None or kind != type_):
            if scheme != "io":
                invalid.append(i)
            close(i, False)
            start, kind = i, type_
        elif prefix in ("B", "S", "O"):
            close(i, False)
            if prefix != "O":
                start, kind = i, type_
        if prefix in ("E", "S"):
            close(i + 1, True)
    close(len(tags), False)
    return spans, sorted(set(invalid))


def spans_to_tags(n: int, spans, scheme: str = "bio") -> list[str]:
    """Tags for ``n`` positions from non-overlapping (start, end_exclusive, type) spans."""
    tags = ["O"] * n
    inside = "M" if scheme == "bmes" else "I"
    for start, end, type_ in spans:
        if scheme == "io":
            tags[start:end] = [f"I-{type_}"] * (end - start)
        elif scheme == "bio":
            tags[start:end] = [f"B-{type_}"] + [f"I-{type_}"] * (end - start - 1)
        elif end - start == 1:
            tags[start] = f"S-{type_}"
        else:
            tags[start:end] = [f"B-{type_}"] + [f"{inside}-{type_}"] * (end - start - 2) + [f"E-{type_}"]
    return tags


def check_spans(spans: list, text: str, where: str, overlapping: str = "error") -> tuple[tuple, list]:
    """Sorted, de-duplicated spans; out-of-range spans are errors, overlaps too unless 'keep-longest'.

    Returns (spans, dropped): with keep-longest the shorter of two overlapping entities is dropped; with 'nested'
    (``ner --nested``) overlapping and nested entities, and one span with two types, are all kept.
    """
    for start, end, type_ in spans:
        if not (isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= len(text)):
            raise UserError(
                f"{where}: entity {type_!r} covering characters {start} to {end - 1} is empty or "
                f"outside the text ({len(text)} characters, numbered from 0); fix its offsets"
            )
    if overlapping == "nested":
        return tuple(sorted(set(spans))), []
    kept, dropped = [], []
    for span in sorted(set(spans), key=lambda s: (s[0] - s[1], s[0], s[2])):  # longest first
        clash = next((k for k in kept if k[0] < span[1] and span[0] < k[1]), None)
        if clash is None:
            kept.append(span)
            continue
        if overlapping != "keep-longest":
            a, b = sorted([clash, span])
            raise UserError(
                f"{where}: entity {text[b[0] : b[1]]!r} [{b[0]}, {b[1]}) {b[2]} overlaps "
                f"{text[a[0] : a[1]]!r} [{a[0]}, {a[1]}) {a[2]}; a tagger labels each character once. "
                "Fix the file, pass --overlapping keep-longest to keep the longer entity, or train with ner --nested "
                "(a span model that keeps nested and overlapping entities)"
            )
        dropped.append(span)
    return tuple(sorted(kept)), dropped

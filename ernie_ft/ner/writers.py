"""NER files out: CoNLL in any tag scheme, CLUENER JSONL and span JSONL, from ``NerExample`` values."""

from __future__ import annotations

import json

from ernie_ft.ner.formats import NerExample
from ernie_ft.ner.tags import spans_to_tags


def write_conll(examples: list[NerExample], scheme: str = "bio", sep: str = "\t") -> str:
    """CoNLL text: one token and its tag per line, a blank line after each sentence.

    Tokens are the example's own CoNLL tokens when it came from such a file, else its characters
    (whitespace skipped). Entities must start and end on token boundaries.
    """
    out = []
    for e in examples:
        tokens = e.tokens or tuple((i, i + 1) for i, c in enumerate(e.text) if not c.isspace())
        index = {start: i for i, (start, _) in enumerate(tokens)}
        ends = {end: i for i, (_, end) in enumerate(tokens)}
        spans = []
        for start, end, type_ in e.entities:
            if start not in index or end not in ends:
                raise ValueError(f"{e.source}:{e.line}: entity [{start}, {end}) does not fall on token boundaries")
            spans.append((index[start], ends[end] + 1, type_))
        tags = spans_to_tags(len(tokens), spans, scheme)
        out += [f"{e.text[s:t]}{sep}{tag}" for (s, t), tag in zip(tokens, tags)] + [""]
    return "\n".join(out) + ("\n" if out else "")


def write_cluener(examples: list[NerExample]) -> str:
    """CLUENER JSONL: {"text", "label": {type: {entity: [[start, end_inclusive], ...]}}} per line."""
    lines = []
    for e in examples:
        label: dict = {}
        for start, end, type_ in e.entities:
            label.setdefault(type_, {}).setdefault(e.text[start:end], []).append([start, end - 1])
        lines.append(json.dumps({"text": e.text, "label": label}, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def write_spans(examples: list[NerExample]) -> str:
    """Span JSONL: {"text", "entities": [{"start", "end" (exclusive), "type", "text"}]} per line."""
    return "".join(
        json.dumps(
            {
                "text": e.text,
                "entities": [{"start": s, "end": t, "type": k, "text": e.text[s:t]} for s, t, k in e.entities],
            },
            ensure_ascii=False,
        )
        + "\n"
        for e in examples
    )

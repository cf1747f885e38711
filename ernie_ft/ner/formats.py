"""NER files in: CoNLL (BIO, BIOES/BMES, IO), CLUENER JSONL, span JSONL and CMeEE; doccano JSONL and Label
Studio JSON exports (``data.annotations``). ``ner.writers`` writes the first three back.

Every format becomes the same internal example: the text and its entities as character spans
``(start, end_exclusive, type)``. Tag schemes are converted at the edge, in ``ner.tags`` (``tags_to_spans`` and
``spans_to_tags``); the model itself is trained on BIO tags derived from the spans.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Optional

from ernie_ft.data import annotations
from ernie_ft.data.sources import Location, check_records, parse_jsonl, read_text_file
from ernie_ft.errors import UserError
from ernie_ft.ner.tags import PREFIXES, TAG, check_spans, detect_scheme, parse_tag, tags_to_spans

FORMATS = ("auto", "conll", "cluener", "spans", "text", "doccano", "label-studio", "cmeee")


@dataclass(frozen=True)
class NerExample:
    """A text with its entities as sorted (start, end_exclusive, type) character spans."""

    text: str
    entities: tuple
    line: int
    source: str
    tokens: Optional[tuple] = None  # (start, end) of each CoNLL token line, to write the file back
    relations: tuple = ()  # ((start, end, type) head, (start, end, type) tail, relation) from doccano/Label Studio


def detect_format(lines: list[str]) -> str:
    """'cluener', 'spans', 'conll' or 'text' (one unlabelled text per line) from a file's content."""
    first = next(line for line in lines if line.strip())
    if first.lstrip().startswith("{"):
        try:
            record = json.loads(first)
        except json.JSONDecodeError:
            record = {}
        return "spans" if isinstance(record, dict) and "entities" in record else "cluener"
    body = [line for line in lines[:2000] if line.strip() and not line.startswith("-DOCSTART-")]
    tagged = sum(len(line.split()) >= 2 and bool(TAG.match(line.split()[-1])) for line in body)
    return "conll" if tagged * 2 >= len(body) else "text"  # a few bad lines: CoNLL, so the error names them


def read_ner(
    path: str,
    flag: str,
    fmt: str = "auto",
    labelled: bool = True,
    overlapping: str = "error",
    predictions_as_labels: bool = False,
) -> list[NerExample]:
    """Examples from a CoNLL, CLUENER JSONL or span JSONL file, a doccano or Label Studio export (or plain text
    lines when unlabelled). ``predictions_as_labels``: a Label Studio task without an annotation is labelled by
    its predictions (``--predictions-as-labels``)."""
    text = read_text_file(path, flag)
    lines = text.split("\n")
    where = f"{flag}: {path}"
    if fmt in ("auto", "doccano", "label-studio"):
        export = annotations.load(text, where, predictions_as_labels=predictions_as_labels)
        if export is not None and fmt in ("auto", export.tool.lower().replace(" ", "-")):
            return _annotation_examples(export, where, path, labelled, overlapping)
        if fmt != "auto":
            _unknown_json(where, export, f"--format {fmt} was given but this is ")
    if fmt in ("auto", "cmeee") and (fmt == "cmeee" or is_cmeee(text)):
        rows = annotations._json_values(text, where, array=True)  # (line, item) of the JSON array
        return _json_examples(where, path, rows, "cmeee", labelled, overlapping, lambda n: Location(f"{where}:{n}"))
    if fmt == "auto":
        fmt = detect_format(lines)
        if fmt in ("conll", "text") and text.lstrip().startswith("["):
            _unknown_json(where, None, "a JSON array, ")
    if fmt == "text":
        if labelled:
            raise UserError(
                f"{where} looks like plain text without entities; give CoNLL (one character and "
                "its tag per line), CLUENER JSONL or span JSONL, or name the format with --format"
            )
        return [NerExample(s.strip(), (), n, path) for n, s in enumerate(lines, 1) if s.strip()]
    if fmt == "conll":
        return _read_conll(where, path, lines, labelled, overlapping)

    def locate(line: int) -> Location:
        return Location(f"{where}:{line}")

    return _json_examples(where, path, parse_jsonl(where, path, lines)[1], fmt, labelled, overlapping, locate)


def read_ner_records(records: list, flag: str, labelled: bool = False, overlapping: str = "error") -> list[NerExample]:
    """The examples ``read_ner`` gives (format auto) for a JSON Lines file of ``records`` (dicts in memory, e.g. a
    served request's inputs), with ``flag`` as their source; a bad field raises UserError naming it
    (``inputs[2].text: ...``)."""
    rows = check_records(records, flag, '{"text": "..."}')
    fmt = "spans" if "entities" in rows[0][1] else "cluener"  # as detect_format tells from a file's first line

    def locate(line: int) -> Location:
        return Location.item(flag, line - 1)

    return _json_examples(flag, flag, rows, fmt, labelled, overlapping, locate)


def _json_examples(where: str, source: str, rows, fmt: str, labelled: bool, overlapping: str, locate) -> list:
    """The examples of CLUENER or span JSON records ``[(line, record), ...]``; ``locate(line)`` is a record's
    Location."""
    examples, dropped = [], []
    for n, record in rows:
        example, lost = _json_example(locate(n), n, source, record, fmt, labelled, overlapping)
        dropped += [(n, example.text, span) for span in lost]
        examples.append(example)
    _note_dropped(where, dropped)
    return examples


def _json_example(at: Location, line: int, source: str, record: dict, fmt: str, labelled: bool, overlapping: str):
    """(the example, the entities --overlapping keep-longest dropped) of one CLUENER or span JSON record."""
    value = record.get("text")
    if not isinstance(value, str) or not value.strip():
        raise UserError(
            f'{at.field("text")}: missing or empty "text"; each line needs {{"text": ..., '
            f"{'label' if fmt == 'cluener' else 'entities'}: ...}}"
        )
    key = "label" if fmt == "cluener" else "entities"
    read_spans = {"cluener": _cluener_spans, "cmeee": _cmeee_spans}.get(fmt, _span_list)
    spans = read_spans(record, value, at.field(key)) if labelled else []
    spans, lost = check_spans(spans, value, at.field(key), overlapping)
    return NerExample(value, spans, line, source), lost


def _cluener_spans(record: dict, text: str, at: str) -> list:
    label = record.get("label")
    if not isinstance(label, dict):
        raise UserError(
            f'{at}: "label" must be an object {{type: {{entity: [[start, end], ...]}}}} (ends '
            'inclusive); write "label": {} for a text without entities'
        )
    spans = []
    for type_, entities in label.items():
        if not isinstance(entities, dict):
            raise UserError(f'{at}: "label"."{type_}" must map each entity text to [[start, end], ...]')
        for name, positions in entities.items():
            if not isinstance(positions, list) or not all(
                isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) for x in p) for p in positions
            ):
                raise UserError(f"{at}: positions of {name!r} must be a list of [start, end] integer pairs")
            for start, last in positions:
                if 0 <= start <= last < len(text) and text[start : last + 1] != name:
                    raise UserError(
                        f"{at}: entity {name!r} at [{start}, {last}] but the text there is "
                        f"{text[start : last + 1]!r}; CLUENER ends are inclusive (the last character)"
                    )
                spans.append((start, last + 1, type_))
    return spans


def _span_list(record: dict, text: str, at: str) -> list:
    entities = record.get("entities")
    if not isinstance(entities, list):
        raise UserError(
            f'{at}: "entities" must be a list of {{"start", "end", "type"}} objects (end exclusive); '
            'write "entities": [] for a text without entities'
        )
    spans = []
    for e in entities:
        if not (
            isinstance(e, dict)
            and isinstance(e.get("start"), int)
            and isinstance(e.get("end"), int)
            and isinstance(e.get("type"), str)
            and e["type"]
        ):
            raise UserError(
                f'{at}: entity {json.dumps(e, ensure_ascii=False)[:60]} needs integer "start" and '
                '"end" (exclusive) and a string "type"'
            )
        start, end = e["start"], e["end"]
        if "text" in e and 0 <= start < end <= len(text) and text[start:end] != e["text"]:
            raise UserError(
                f"{at}: entity {e['text']!r} at [{start}, {end}) but the text there is "
                f"{text[start:end]!r}; span ends are exclusive"
            )
        spans.append((start, end, e["type"]))
    return spans


def is_cmeee(text: str) -> bool:
    """Whether ``text`` is a JSON array as CBLUE ships CMeEE: records whose entities have ``start_idx``."""
    head = text.lstrip()[:2000]
    return head.startswith("[") and '"start_idx"' in head and '"end_idx"' in head


def _cmeee_spans(record: dict, text: str, at: str) -> list:
    """CMeEE's entities ``{"start_idx", "end_idx" (inclusive), "type", "entity"}`` as (start, end_exclusive, type)."""
    entities = record.get("entities")
    if not isinstance(entities, list):
        raise UserError(f'{at}: "entities" must be a list of {{"start_idx", "end_idx", "type", "entity"}} objects')
    spans = []
    for e in entities:
        if not (isinstance(e, dict) and all(isinstance(e.get(k), int) for k in ("start_idx", "end_idx"))):
            raise UserError(
                f'{at}: entity {json.dumps(e, ensure_ascii=False)[:60]} needs integer "start_idx" and "end_idx" '
                '(inclusive) and a string "type"'
            )
        if not isinstance(e.get("type"), str) or not e["type"]:
            raise UserError(f'{at}: entity {json.dumps(e, ensure_ascii=False)[:60]} needs a string "type"')
        start, last = e["start_idx"], e["end_idx"]
        named = e.get("entity")
        if 0 <= start <= last < len(text) and isinstance(named, str) and text[start : last + 1] != named:
            raise UserError(
                f"{at}: entity {named!r} at [{start}, {last}] but the text there is "
                f"{text[start : last + 1]!r}; CMeEE's end_idx is inclusive (the last character)"
            )
        spans.append((start, last + 1, e["type"]))
    return spans


def _unknown_json(where: str, export, what: str) -> None:
    found = "no annotation tool's export" if export is None else f"a {export.tool} export"
    raise UserError(
        f"{where}:1: {what}{found}; NER reads CoNLL, CLUENER or span JSONL, doccano JSONL and Label Studio JSON "
        "(a JSON array of tasks with data and annotations)"
    )


def _annotation_examples(export, where: str, path: str, labelled: bool, overlapping: str) -> list[NerExample]:
    """The examples of a doccano or Label Studio export (``annotations.Export``): its spans checked as every
    format's are (ends exclusive), its relations kept on the examples."""
    if labelled and not export.has_spans and any(r.labels for r in export.records):
        raise UserError(
            f"{where}:{export.records[0].line}: this {export.tool} file labels classes, not entity spans; train "
            "it with python -m ernie_ft classify"
        )
    records = annotations.labelled_records(export, where) if labelled else export.records
    examples, dropped = [], []
    for r in records:
        at = f"{where}:{r.line}"  # a Label Studio task's line names the task (TaskLine)
        spans, lost = check_spans(list(r.spans), r.text, at, overlapping) if labelled else ((), [])
        dropped += [(r.line, r.text, span) for span in lost]
        examples.append(NerExample(r.text, spans, r.line, path, relations=r.relations if labelled else ()))
    print(f"{where}: {export.summary}", file=sys.stderr)
    _note_dropped(where, dropped)
    return examples


def _read_conll(where: str, path: str, lines: list[str], labelled: bool, overlapping: str) -> list[NerExample]:
    sentences, current = [], []
    for n, line in enumerate(lines, 1):
        line = line.rstrip("\r")
        if not line.strip() or line.startswith("-DOCSTART-"):
            if current:
                sentences.append(current)
            current = []
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        if len(fields) < 2 and labelled:
            raise UserError(
                f"{where}:{n}: expected a token and its tag separated by a tab or a space, found {line[:40]!r}"
            )
        tag = fields[-1].strip() if labelled else "O"
        current.append((n, fields[0] or " ", parse_tag(tag, f"{where}:{n}"), tag))
    if current:
        sentences.append(current)
    raw = {tag[0].upper() for sentence in sentences for *_, tag in sentence if tag != "O"}
    scheme = detect_scheme({PREFIXES[p] for p in raw}, raw)
    char_level = all(len(token) == 1 for sentence in sentences for _, token, *_ in sentence)
    examples, repaired, dropped = [], [], []
    for sentence in sentences:
        text, offsets = "", []
        for _, token, *_ in sentence:
            if text and not char_level and _needs_space(text[-1], token[0]):
                text += " "
            offsets.append((len(text), len(text) + len(token)))
            text += token
        positions, invalid = tags_to_spans([parsed for _, _, parsed, _ in sentence], scheme)
        repaired += [sentence[i][0] for i in invalid]
        spans = [(offsets[s][0], offsets[e - 1][1], t) for s, e, t in positions]
        spans, lost = check_spans(spans, text, f"{where}:{sentence[0][0]}", overlapping)
        dropped += [(sentence[0][0], text, span) for span in lost]
        examples.append(NerExample(text, spans, sentence[0][0], path, tuple(offsets)))
    if repaired:
        lines_shown = ", ".join(map(str, repaired[:8])) + (" ..." if len(repaired) > 8 else "")
        print(
            f"note: {where}: {len(repaired)} tags break the {scheme.upper()} scheme (lines {lines_shown}); "
            "repaired as conlleval does: an I-/E- tag that does not continue an entity of its type starts "
            "one, and an entity left open ends at its last tag",
            file=sys.stderr,
        )
    _note_dropped(where, dropped)
    return examples


def _needs_space(left: str, right: str) -> bool:
    """Whether two word tokens of a CoNLL file were separated by a space (Latin letters and digits)."""
    return left.isascii() and left.isalnum() and right.isascii() and right.isalnum()


def _note_dropped(where: str, dropped: list) -> None:
    if dropped:
        shown = "; ".join(f"line {n}: {text[s:e]!r} {t}" for n, text, (s, e, t) in dropped[:5])
        print(
            f"note: {where}: --overlapping keep-longest dropped {len(dropped)} entities that overlap a longer "
            f"one ({shown})",
            file=sys.stderr,
        )


def check_choice(value: str, choices, flag: str) -> None:
    if value not in choices:
        raise UserError(f"{flag} must be one of {', '.join(choices)}, not {value!r}")

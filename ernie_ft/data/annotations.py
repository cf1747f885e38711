"""Files as annotation tools export them: doccano JSONL and Label Studio's JSON, recognised by their content.

``load`` tells such a file from the project's own formats and turns every record or task into one
``Annotated``: its text, its class names (doccano ``label`` names, Label Studio ``choices``), its entity
spans ``(start, end_exclusive, type)`` and its relations ``(head span, tail span, type)``. The readers
make classification records (``classification_rows``) or NER examples of them; a file that is none of
these returns None and is read as before. A JSON file whose text ends inside a value or an array (cut off
while written, copied or downloaded) raises ``Truncated``, naming the line and character where it ends.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Optional

from ernie_ft.data.annotated import Annotated, Export, TaskLine, count, items
from ernie_ft.data.label_studio import PREDICTIONS_FLAG, read_label_studio
from ernie_ft.errors import UserError

_SPACE = " \t\r\n"


class Truncated(UserError):
    """A JSON file that ends in the middle of a value: cut off while it was written, copied or downloaded."""


def _json_values(text: str, where: str, array: bool) -> list[tuple[int, object]]:
    """(line, value) of each JSON value in ``text``: the items of a JSON array (``array``), else the values
    one after another (JSON Lines, or pretty-printed objects as doccano's examples are). A text that ends
    inside a value, or inside the array, raises ``Truncated``."""
    decoder, values, line, pos, counted = json.JSONDecoder(), [], 1, 0, 0

    def skip(pos: int, separators: str) -> int:
        while pos < len(text) and text[pos] in separators:
            pos += 1
        return pos

    if array:
        pos = skip(text.index("[") + 1, _SPACE)
    while True:
        pos = skip(pos, _SPACE + ("," if array and values else ""))
        if pos >= len(text) and array:
            raise truncated(text, where, "before the closing ] of its JSON array")
        if pos >= len(text) or (array and text[pos] == "]"):
            return values
        line, counted = line + text.count("\n", counted, pos), pos  # counted so far: linear in the file
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            if ends_mid_value(text, e):
                raise truncated(text, where, "inside a JSON value") from None
            raise UserError(
                f"{where}:{e.lineno}:{e.colno}: invalid JSON ({e.msg}); fix the file or export it again"
            ) from None
        values.append((line, value))


_PARTIAL = re.compile(r"[-+.eE0-9]*|t(r(u)?)?|f(a(l(s)?)?)?|n(u(l)?)?")  # what a number, true, false or null begins


def ends_mid_value(text: str, error: json.JSONDecodeError) -> bool:
    """Whether a decode error is the text ending mid-value rather than a wrong character: nothing but the start of
    a number or literal follows where it failed, or a string runs to the end (a string cut at a line break is an
    "Invalid control character" instead)."""
    rest = text[error.pos :].strip()
    if error.msg.startswith("Unterminated string") or (error.msg.startswith("Invalid \\uXXXX") and len(rest) < 6):
        return True
    return _PARTIAL.fullmatch(rest) is not None


def truncated(text: str, where: str, inside: str) -> Truncated:
    """The error for ``text`` (a whole file) that ends ``inside`` a value: the line and character where it ends."""
    end = len(text.rstrip())
    line = text.count("\n", 0, end) + 1
    column = end - (text.rfind("\n", 0, end) + 1)
    return Truncated(
        f"{where}:{line}:{column}: the file is truncated: its text ends at line {line}, character {column}, {inside}; "
        "it was cut off while being written, copied or downloaded: export or copy it again"
    )


def load(
    text: str,
    where: str,
    text_key: Optional[str] = None,
    predictions_as_labels: bool = False,
    pair_key: Optional[str] = None,
) -> Optional[Export]:
    """The doccano or Label Studio export in ``text`` (a whole file; ``where`` is "FLAG: PATH"), or None when
    the content is neither. ``text_key``: the key of Label Studio's ``data`` that holds the text;
    ``predictions_as_labels``: a Label Studio task without an annotation is labelled by its predictions (else it
    is unannotated, and counted); ``pair_key``: the key of a sentence pair's second text. A truncated JSON file,
    whatever it holds, raises ``Truncated``."""
    start = text.lstrip()
    if start.startswith("["):
        try:
            tasks = _json_values(text, where, array=True)
        except Truncated:
            raise
        except UserError:
            return None  # not JSON: the caller's own reader names what is wrong
        if tasks and isinstance(tasks[0][1], dict) and {"data", "annotations", "predictions"} & set(tasks[0][1]):
            export = read_label_studio(tasks, where, text_key, predictions_as_labels, pair_key)
            export.records = [dataclasses.replace(r, line=TaskLine(r.line, r.task)) for r in export.records]
            return export
        return None
    if not start.startswith("{"):
        return None
    first_line = start.split("\n", 1)[0]
    try:
        first = json.loads(first_line)
    except json.JSONDecodeError:
        try:  # a pretty-printed object, as doccano's own examples are
            first = _json_values(text, where, array=False)[0][1]
        except Truncated:
            raise
        except UserError:
            return None
    if not _is_doccano(first):
        return None
    return _doccano(_json_values(text, where, array=False), where)


def _is_doccano(record) -> bool:
    """Whether a JSON record has doccano's layout rather than the project's own JSONL or CLUENER's."""
    if not isinstance(record, dict):
        return False
    label = record.get("label")
    entities = record.get("entities")
    return (
        (isinstance(record.get("data"), str) and "text" not in record)
        or "relations" in record
        or (isinstance(label, list) and bool(label))
        or (isinstance(entities, list) and any(isinstance(e, dict) and "start_offset" in e for e in entities))
    )


# ----------------------------------------------------------------------------------------------- doccano


def _doccano(values: list, where: str) -> Export:
    records, kinds, old_key, twice, twice_related = [], set(), False, 0, 0
    for line, record in values:
        at = f"{where}:{line}"
        if not isinstance(record, dict):
            raise UserError(f"{at}: expected a doccano record (a JSON object with text and label), not {record!r:.40}")
        text = record.get("text", record.get("data"))
        old_key |= "text" not in record and "data" in record
        if not isinstance(text, str) or not text.strip():
            raise UserError(f'{at}: missing or empty "text" (doccano 1.7+) or "data" (older doccano); fill it in')
        if "entities" in record:
            spans, relations, untyped = _doccano_entities(record, at)
            records.append(Annotated(line, _id(record), text, (), _once(spans), _once(relations), untyped=untyped))
            twice_related += len(relations) - len(records[-1].relations)
            kinds.add("entities and relations" if "relations" in record else "entities")
        elif "label" in record:
            labels, spans = _doccano_label(record["label"], at)
            records.append(Annotated(line, _id(record), text, labels, _once(spans)))
            kinds.add("sequence labelling" if spans else "text classification")
        else:
            records.append(Annotated(line, _id(record), text, labelled=False))
            continue
        twice += len(spans) - len(records[-1].spans)
    layout = " and ".join(sorted(kinds)) or "texts without labels"
    relations = sum(len(r.relations) for r in records)
    untyped = sum(len(r.untyped) for r in records)
    summary = f"doccano JSONL ({layout}{', the older data key' if old_key else ''}), {count(records, 'record')}"
    summary += f", {relations} relations kept" if relations else ""
    summary += f", {untyped} relations without a type not read" if untyped else ""
    summary += f", {twice} entities listed twice (the same span and type) kept once" if twice else ""
    summary += f", {twice_related} relations listed twice kept once" if twice_related else ""
    return Export("doccano", records, summary)


def _name(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _once(spans: tuple) -> tuple:
    """``spans`` without repeats, in their order."""
    return tuple(dict.fromkeys(spans))


def _id(record: dict) -> Optional[str]:
    return None if record.get("id") is None else str(record["id"])


def _doccano_label(label, at: str) -> tuple[tuple, tuple]:
    """(class names, spans) of a doccano ``label``: a list of names, or of ``[start, end, type]``."""
    if not isinstance(label, list):
        label = [label]  # a single name, as some exports write it
    if all(isinstance(item, list) for item in label):
        spans = []
        for item in label:
            if not (len(item) == 3 and all(isinstance(x, int) for x in item[:2]) and _name(item[2])):
                raise UserError(f"{at}: label item {item!r:.40} is not [start, end, type] (end exclusive)")
            spans.append(tuple(item))
        return (), tuple(spans)
    if any(isinstance(item, (list, dict)) for item in label):
        raise UserError(f"{at}: label mixes names and [start, end, type] spans; a record holds one kind")
    return tuple(str(item) for item in label), ()


def _doccano_entities(record: dict, at: str) -> tuple[tuple, tuple, tuple]:
    """(spans, relations, ids of relations without a type) of doccano's ``entities`` + ``relations`` layout."""
    entities, by_id = record.get("entities"), {}
    if not isinstance(entities, list):
        raise UserError(f'{at}: "entities" must be a list of {{"start_offset", "end_offset", "label"}} objects')
    spans = []
    for e in entities:
        ok = isinstance(e, dict) and isinstance(e.get("start_offset"), int) and isinstance(e.get("end_offset"), int)
        if not ok or not isinstance(e.get("label"), str) or not e["label"].strip():
            raise UserError(
                f'{at}: entity {e!r:.60} needs integer "start_offset", "end_offset" and a non-empty string "label"'
            )
        span = (e["start_offset"], e["end_offset"], e["label"])
        by_id[e.get("id")] = span
        spans.append(span)
    relations, untyped = [], []
    for r in items(record.get("relations")):
        if not isinstance(r, dict) or r.get("from_id") not in by_id or r.get("to_id") not in by_id:
            raise UserError(f"{at}: relation {r!r:.60} does not name two of the record's entity ids (from_id, to_id)")
        predicate = r.get("type", r.get("label"))
        if isinstance(predicate, (str, int)) and not isinstance(predicate, bool) and str(predicate).strip():
            relations.append((by_id[r["from_id"]], by_id[r["to_id"]], str(predicate)))
        else:
            untyped.append(str(r.get("id")))
    return tuple(spans), tuple(relations), tuple(untyped)


# ---------------------------------------------------------------------------------------------- records


def classification_rows(
    export: Export, where: str, labelled: bool, separator: Optional[str] = None
) -> tuple[list[str], list[tuple[int, dict]]]:
    """(columns, [(line, {"text", "label": [names]})]) for a classifier; the label stays a list of names. A label
    path of Label Studio's ``<Taxonomy>`` (a tuple of its nodes) is joined by ``separator`` (``classify
    --hierarchy-separator``); a path of several nodes without one is an error naming the flag.

    Records without any annotation are an error when labels are needed (a Label Studio task nobody
    labelled is skipped instead, and counted in the summary); a file of entity spans is an error."""
    if export.has_spans:
        first = next(r for r in export.records if r.spans)
        raise UserError(
            f"{where}:{first.line}: this {export.tool} file labels entity spans, not classes; train it with "
            "python -m ernie_ft ner"
        )
    rows = []
    for r in export.records:
        if not r.labelled and labelled:
            if export.tool == "Label Studio":
                continue
            raise UserError(_unknown(export, where, r))
        key = export.text_key
        labels = [_label_path(label, separator, where, r) for label in r.labels]
        texts = {key: r.text, export.pair_key: r.text_pair} if r.text_pair is not None else {key: r.text}
        rows.append((r.line, {**texts, "label": labels} if r.labelled else texts))
    if not rows:
        raise UserError(_nothing_labelled(export, where))
    # a record's label list stays readable without required labels (classify --multi-label: a text may have none)
    has_labels = labelled or any("label" in row for _, row in rows)
    keys = [export.text_key, export.pair_key] if export.pair_key else [export.text_key]
    return [*keys, "label"] if has_labels else keys, rows


def _label_path(label, separator: Optional[str], where: str, record: Annotated) -> str:
    """A class name as it is; a ``<Taxonomy>`` path (a tuple of nodes) joined by ``separator``, a one-node path as
    its node."""
    if isinstance(label, str) or len(label) == 1:
        return label if isinstance(label, str) else label[0]
    at = f"{where}:{record.line}: the Taxonomy label path {' > '.join(label)}"
    if separator is None:
        raise UserError(
            f"{at} has {len(label)} levels; pass --hierarchy-separator SEP (a string no node name holds, e.g. /) to "
            "train on label paths"
        )
    held = next((node for node in label if separator in node), None)
    if held is not None:
        raise UserError(
            f"{at}: its node {held!r} holds the separator {separator!r}; give --hierarchy-separator a string that "
            "no node name holds"
        )
    return separator.join(label)


def _nothing_labelled(export: Export, where: str) -> str:
    if export.predictions_only:
        return (
            f"{where}: no task has a non-cancelled annotation; {export.predictions_only} have predictions only: label "
            f"them in Label Studio, or pass {PREDICTIONS_FLAG} to train on the predictions as if they were labels"
        )
    return f"{where}: no task has a non-cancelled annotation or a prediction; label some tasks first"


def _unknown(export: Export, where: str, record: Annotated) -> str:
    return (
        f"{where}:{record.line}: a {export.tool} record with neither label nor entities; this layout is unknown "
        'here: each record needs "label" (names, or [start, end, type] spans) or "entities"'
    )


def labelled_records(export: Export, where: str) -> list[Annotated]:
    """The records that carry annotations: a doccano record without any is an error, a Label Studio task without
    any is skipped (counted in the summary)."""
    kept = []
    for r in export.records:
        if not r.labelled and export.tool == "doccano":
            raise UserError(_unknown(export, where, r))
        if r.labelled:
            kept.append(r)
    if not kept:
        raise UserError(_nothing_labelled(export, where))
    return kept

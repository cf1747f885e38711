"""Relation files in: DuIE / CMeIE JSON Lines, ernie_ft's own relation JSONL (what ``predict`` writes), doccano
relation exports and Label Studio exports (``data.annotations``); DuIE's schema file.

Every format becomes a ``RelationExample``: the text, its triples placed in the text as character spans
``((start, end_exclusive, type), relation class, (start, end_exclusive, type))``, and the triples as scored
(subject text, predicate, object text), placed or not.

DuIE's strings carry no offsets. Placement rule: the subject is the string's first occurrence in the text;
the object is its occurrence nearest the subject (by start, the earlier on a tie; another occurrence than the
subject's own span when subject and object are the same string). A string not found as it is is looked up
ignoring case. A triple whose subject or object is not in the text is not placed (it is no training target but
is still scored, as a miss); a triple whose subject or object occurs more than once is placed ambiguously. The
loading line counts both.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Optional

from ernie_ft.data import annotations
from ernie_ft.data.sources import Location, check_records, parse_jsonl, read_text_file
from ernie_ft.errors import UserError

RECORD = '{"text": "...", "spo_list": [{"subject": "...", "predicate": "...", "object": {"@value": "..."}}]}'
_LABEL = re.compile(r"^(.*) \(([^()]*)→([^()]*)\)$")


@dataclass(frozen=True)
class RelationExample:
    """A text, its placed triples (spans and relation class) and every triple as scored (texts)."""

    text: str
    triples: tuple  # ((s, e, type), class label, (s, e, type)), sorted
    gold: tuple  # (subject text, predicate, object text), sorted, placed or not
    line: int
    source: str

    @property
    def entities(self) -> tuple:
        """Subjects and objects of the placed triples as (start, end, type), sorted."""
        return tuple(sorted({span for s, _, o in self.triples for span in (s, o)}))


def class_label(predicate: str, subject_type: str, object_type: str) -> str:
    """A relation class: the predicate with its subject and object types, ``作曲 (歌曲→人物)``, or the predicate."""
    return f"{predicate} ({subject_type}→{object_type})" if subject_type or object_type else predicate


def parse_label(label: str) -> tuple[str, str, str]:
    """(predicate, subject type, object type) of a ``class_label``."""
    m = _LABEL.match(label)
    return (m[1], m[2], m[3]) if m else (label, "", "")


def _value(value, at: str, what: str, required: bool = True) -> str:
    """A DuIE field: a string or ``{"@value": string}``."""
    if isinstance(value, dict):
        value = value.get("@value")
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise UserError(f'{at}: {what} must be a non-empty string or {{"@value": string}}, found {value!r:.40}')
    return value


def occurrences(text: str, s: str) -> list[int]:
    """Start of every occurrence of ``s`` in ``text`` (overlapping ones too), else of it ignoring case."""
    for hay, needle in ((text, s), (text.lower(), s.lower())):
        if len(hay) != len(text):  # lower() changed the length: offsets would not map back
            break
        found, i = [], hay.find(needle)
        while i >= 0:
            found.append(i)
            i = hay.find(needle, i + 1)
        if found:
            return found
    return []


def place(text: str, subject: str, obj: str) -> Optional[tuple[tuple, tuple, bool]]:
    """((s, e) subject, (s, e) object, ambiguous) by the placement rule of this module, or None."""
    subjects, objects = occurrences(text, subject), occurrences(text, obj)
    if not subjects or not objects:
        return None
    s = subjects[0]
    others = [o for o in objects if (o, len(obj)) != (s, len(subject))] or objects
    o = min(others, key=lambda p: (abs(p - s), p))
    return (s, s + len(subject)), (o, o + len(obj)), len(subjects) > 1 or len(objects) > 1


class Counts(dict):
    """What a reader did, for its loading line."""

    def __missing__(self, key):
        return 0


def _duie_triples(spo_list, text: str, at: str, counts: Counts) -> tuple[list, list]:
    """(placed triples, scored triples) of a DuIE ``spo_list``."""
    if not isinstance(spo_list, list):
        raise UserError(f'{at}: "spo_list" must be a list of {{"subject", "predicate", "object"}} objects')
    placed, gold = [], []
    for spo in spo_list:
        if not isinstance(spo, dict):
            raise UserError(f"{at}: spo_list item {spo!r:.40} is not an object with subject, predicate and object")
        predicate = _value(spo.get("predicate"), at, "predicate")
        subject, obj = _value(spo.get("subject"), at, "subject"), _value(spo.get("object"), at, "object")
        types = (_value(spo.get(k), at, k, required=False) for k in ("subject_type", "object_type"))
        s_type, o_type = types
        counts["slots"] += len(set(spo["object"]) - {"@value"}) if isinstance(spo["object"], dict) else 0
        gold.append((subject, predicate, obj))
        counts["triples"] += 1
        found = place(text, subject, obj)
        if found is None:
            counts["unplaced"] += 1
            continue
        (s, e), (os_, oe), ambiguous = found
        counts["ambiguous"] += ambiguous
        placed.append(((s, e, s_type), class_label(predicate, s_type, o_type), (os_, oe, o_type)))
    return placed, gold


def _span(entity, text: str, at: str) -> tuple[int, int, str]:
    """(start, end, type) of an entity given with offsets (``{"text", "start", "end", "type"}``), checked."""
    if not isinstance(entity, dict) or not all(isinstance(entity.get(k), int) for k in ("start", "end")):
        raise UserError(f'{at}: entity {entity!r:.60} needs integer "start" and "end" (end exclusive)')
    span = (entity["start"], entity["end"], str(entity.get("type") or ""))
    check_span(span, text, at)
    if "text" in entity and entity["text"] != text[span[0] : span[1]]:
        raise UserError(
            f"{at}: entity {entity['text']!r} at [{span[0]}, {span[1]}) but the text there is "
            f"{text[span[0] : span[1]]!r}; fix its offsets or its text"
        )
    return span


def check_span(span: tuple, text: str, at: str) -> None:
    start, end, type_ = span
    if not 0 <= start < end <= len(text):
        raise UserError(
            f"{at}: entity {type_!r} at [{start}, {end}) is empty or outside the text ({len(text)} characters, "
            "numbered from 0, end exclusive); fix its offsets"
        )


def _own_triples(relations, text: str, at: str) -> tuple[list, list]:
    """(placed, scored) triples of ernie_ft's relation JSONL: subject and object with offsets."""
    if not isinstance(relations, list):
        raise UserError(f'{at}: "relations" must be a list of {{"subject", "predicate", "object"}} objects')
    placed = []
    for r in relations:
        if not isinstance(r, dict) or not isinstance(r.get("predicate"), str) or not r["predicate"]:
            raise UserError(f'{at}: relation {r!r:.60} needs "subject", "predicate" (a string) and "object"')
        s, o = _span(r.get("subject"), text, at), _span(r.get("object"), text, at)
        placed.append((s, class_label(r["predicate"], s[2], o[2]), o))
    return placed, [(text[s[0] : s[1]], parse_label(c)[0], text[o[0] : o[1]]) for s, c, o in placed]


def _example(text: str, placed: list, gold: list, line: int, source: str, counts: Counts = None) -> RelationExample:
    """The example of one text; a triple given twice (the same spans, predicate and types) is kept once and counted
    in ``counts["duplicates"]``."""
    if counts is not None:
        counts["duplicates"] += len(placed) - len(set(placed))
    return RelationExample(text, tuple(sorted(set(placed))), tuple(sorted(gold)), line, source)


def _rows_examples(rows, source: str, labelled: bool, locate, counts: Counts) -> list[RelationExample]:
    examples = []
    for n, record in rows:
        at = locate(n)
        text = record.get("text")
        if not isinstance(text, str) or not text.strip():
            needs = RECORD if labelled else '{"text": "..."}'
            raise UserError(f'{at.field("text")}: missing or empty "text"; each record needs {needs}')
        placed, gold = [], []
        if labelled and "spo_list" in record:
            counts["duie"] += 1
            placed, gold = _duie_triples(record["spo_list"], text, at.field("spo_list"), counts)
        elif labelled and "relations" in record:
            placed, gold = _own_triples(record["relations"], text, at.field("relations"))
            counts["triples"] += len(placed)
        examples.append(_example(text, placed, gold, n, source, counts))
    return examples


_NO_LABEL = {"Label Studio": '"labels": []', "doccano": 'no "type"'}


def _export_examples(export, where: str, source: str, labelled: bool, counts: Counts) -> list[RelationExample]:
    """Examples of a doccano or Label Studio export: its relations (head -> tail) as triples."""
    records = annotations.labelled_records(export, where) if labelled else export.records
    examples = []
    for r in records:
        at = f"{where}:{r.line}"  # a Label Studio task's line names the task (TaskLine)
        if r.dangling:
            raise UserError(
                f"{at}: relation {r.dangling[0]} names a region that is not in the annotation (from_id or to_id); "
                "fix the export or delete the relation in the tool"
            )
        if r.untyped and labelled:
            raise UserError(
                f"{at}: relation {r.untyped[0]} has no label ({_NO_LABEL[export.tool]}), so there is no predicate to "
                f"learn; label it in {export.tool} or delete it"
            )
        for span in r.spans:
            check_span(span, r.text, at)
        placed = [(head, predicate, tail) for head, tail, predicate in r.relations] if labelled else []
        for head, _, tail in placed:
            check_span(head, r.text, at)
            check_span(tail, r.text, at)
        counts["triples"] += len(placed)
        counts["outside"] += len(set(r.spans) - {s for h, _, t in placed for s in (h, t)})
        placed = [(h, class_label(p, h[2], t[2]), t) for h, p, t in placed]
        gold = [(r.text[h[0] : h[1]], parse_label(c)[0], r.text[t[0] : t[1]]) for h, c, t in placed]
        examples.append(_example(r.text, placed, gold, r.line, source, counts))
    return examples


def read_relations(
    path: str, flag: str, labelled: bool = True, predictions_as_labels: bool = False
) -> list[RelationExample]:
    """Examples of a DuIE/CMeIE or relation JSONL file, a doccano or Label Studio export, or (unlabelled) plain
    text lines; prints the loading line (what was placed, ambiguously or not at all). ``predictions_as_labels``:
    a Label Studio task without an annotation is labelled by its predictions (``--predictions-as-labels``).

    A relation of an export without a label is an error (it has no predicate to learn), as a DuIE triple
    without a predicate is."""
    text = read_text_file(path, flag)
    where = f"{flag}: {path}"
    counts = Counts()
    export = None if _own_layout(text) else annotations.load(text, where, predictions_as_labels=predictions_as_labels)
    if export is not None:
        examples = _export_examples(export, where, path, labelled, counts)
        kind = export.summary
    elif not text.lstrip().startswith("{"):
        if labelled:
            raise UserError(f"{where}: not JSON Lines; relation files hold one {RECORD} per line")
        return [_example(s.strip(), [], [], n, path) for n, s in enumerate(text.split("\n"), 1) if s.strip()]
    else:
        rows = parse_jsonl(where, path, text.split("\n"), RECORD)[1]
        examples = _rows_examples(rows, path, labelled, lambda n: Location(f"{where}:{n}"), counts)
        kind = "DuIE JSON Lines" if counts["duie"] else "relation JSON Lines"
    if labelled:
        print(f"{where}: {kind}; {loading_line(examples, counts)}", file=sys.stderr)
    return examples


def _own_layout(text: str) -> bool:
    """Whether a file's first line is a DuIE record or one of ernie_ft's relation JSONL (whose "relations" hold
    subjects and objects, where doccano's hold from_id and to_id)."""
    try:
        first = json.loads(text.lstrip().split("\n", 1)[0])
    except json.JSONDecodeError:
        return False
    if not isinstance(first, dict):
        return False
    relations = first.get("relations")
    own = isinstance(relations, list) and any(isinstance(r, dict) and "subject" in r for r in relations)
    return "spo_list" in first or own


def read_relation_records(records: list, flag: str) -> list[RelationExample]:
    """Unlabelled examples of records in memory (a served request's inputs), ``{"text": ...}`` each."""
    rows = check_records(records, flag, '{"text": "..."}')
    return _rows_examples(rows, flag, False, lambda n: Location.item(flag, n - 1), Counts())


def loading_line(examples: list, counts: Counts) -> str:
    placed = sum(len(e.triples) for e in examples)
    parts = [f"{len(examples)} texts, {counts['triples']} triples, {placed} placed as spans"]
    if counts["duie"]:
        parts.append(
            f"{counts['ambiguous']} of them ambiguously (the subject or object string occurs more than once: the "
            f"subject's first occurrence and the object's nearest to it were taken), {counts['unplaced']} not placed "
            "(a string not in the text: not learnt, scored as misses)"
        )
    if counts["slots"]:
        parts.append(f"{counts['slots']} object slots other than @value (inWork, onDate...) not modelled")
    if counts["outside"]:
        parts.append(f"{counts['outside']} entities in no relation (not learnt: the model finds subjects and objects)")
    if counts["duplicates"]:
        parts.append(f"{counts['duplicates']} triples given twice in a text (kept once)")
    return "; ".join(parts)


def read_schema(path: str) -> dict[str, set]:
    """DuIE's schema: a JSON array or JSON Lines of ``{"predicate", "subject_type", "object_type"}`` ->
    {predicate: {(subject type, object type), ...}}."""
    text = read_text_file(path, "--schema")
    where = f"--schema: {path}"
    if text.lstrip().startswith("["):
        try:
            items = list(enumerate(json.loads(text), 1))
        except json.JSONDecodeError as e:
            raise UserError(f"{where}:{e.lineno}: invalid JSON ({e.msg})") from None
        at = f"{where}: item"
    else:
        items, at = parse_jsonl(where, path, text.split("\n"), '{"predicate", "subject_type", "object_type"}')[1], where
    schema: dict[str, set] = {}
    for n, item in items:
        if not isinstance(item, dict):
            raise UserError(f'{at} {n}: expected {{"predicate", "subject_type", "object_type"}}')
        predicate = _value(item.get("predicate"), f"{at} {n}", "predicate")
        types = tuple(_value(item.get(k), f"{at} {n}", k) for k in ("subject_type", "object_type"))
        schema.setdefault(predicate, set()).add(types)
    if not schema:
        raise UserError(f"{where}: no predicates; give one {{predicate, subject_type, object_type}} per line")
    return schema


def allowed(schema: Optional[dict], label: str) -> bool:
    """Whether a relation class fits the schema (types not given are not checked); True without a schema."""
    if schema is None:
        return True
    predicate, s_type, o_type = parse_label(label)
    pairs = schema.get(predicate)
    if pairs is None:
        return False
    return not (s_type or o_type) or any(s_type in (s, "") and o_type in (o, "") for s, o in pairs)


def check_schema(examples: list, schema: dict, schema_path: str, flag: str) -> None:
    """A triple whose predicate (or types) is outside the schema is an error naming its file and line."""
    for e in examples:
        for s, label, o in e.triples:
            if not allowed(schema, label):
                predicate, s_type, o_type = parse_label(label)
                known = schema.get(predicate)
                why = (
                    f"predicate {predicate!r} is not in --schema {schema_path} ({len(schema)} predicates)"
                    if known is None
                    else f"{predicate!r} takes {' or '.join(f'{a}→{b}' for a, b in sorted(known))} in --schema "
                    f"{schema_path}, not {s_type}→{o_type}"
                )
                raise UserError(
                    f"{flag}: {e.source}:{e.line}: triple ({e.text[s[0] : s[1]]}, {predicate}, "
                    f"{e.text[o[0] : o[1]]}): {why}; fix the file or the schema"
                )

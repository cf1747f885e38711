"""Label Studio's JSON export: each task's most recent non-cancelled annotation (its predictions only with
``--predictions-as-labels``) as one ``Annotated`` (its ``choices``, its ``taxonomy`` label paths as tuples of their
nodes, its labelled regions as spans, the relations between them), and the summary the loading line shows: every
task, annotation, region or relation not read as it is, counted. ``annotations.load`` recognises the file and calls
``read_label_studio``."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import replace
from typing import Callable, Optional

from ernie_ft.data.annotated import Annotated, Export, count, items, names
from ernie_ft.errors import UserError

PREDICTIONS_FLAG = "--predictions-as-labels"


def read_label_studio(
    tasks: list,
    where: str,
    text_key: Optional[str],
    predictions_as_labels: bool = False,
    pair_key: Optional[str] = None,
) -> Export:
    """The Export of Label Studio's tasks ``[(line, task), ...]``. A task without a non-cancelled annotation is
    unlabelled, unless it has predictions and ``predictions_as_labels`` says to take them as its labels.
    ``pair_key``: the key of each task's data that holds a sentence pair's second text (None: no pair)."""
    records, counts, keys, mismatched = [], Counter(), set(), []
    for line, task in tasks:
        at = f"{where}:{line}: task {task.get('id', '?') if isinstance(task, dict) else '?'}"
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
            raise UserError(f'{at}: not a Label Studio task (an object with "data" and "annotations")')
        key = _text_key(task["data"], text_key, at)
        keys.add(key)
        text = task["data"][key]
        pair = task["data"][_text_key(task["data"], pair_key, at, "--text-pair-column")] if pair_key else None
        annotations = [a for a in items(task.get("annotations")) if isinstance(a, dict)]
        done = [a for a in annotations if not a.get("was_cancelled")]
        counts["cancelled"] += len(annotations) - len(done)
        predictions = [p for p in items(task.get("predictions")) if isinstance(p, dict)]
        if not done and predictions:
            counts["predicted" if predictions_as_labels else "predictions only"] += 1
            done = predictions if predictions_as_labels else []
        elif not done:
            counts["unannotated"] += 1
        if not done:
            records.append(Annotated(line, str(task.get("id")), text, labelled=False, text_pair=pair))
            continue
        result = items(_most_recent(done).get("result"))
        record = _task_record(line, task, text, result, at, counts, mismatched)
        records.append(replace(record, text_pair=pair) if pair_key else record)
    if mismatched:
        raise UserError(_mismatch_message(mismatched))
    summary = _ls_summary(records, counts, keys | ({pair_key} if pair_key else set()))
    export = Export("Label Studio", records, summary, text_key or "text", predictions_only=counts["predictions only"])
    export.pair_key = pair_key
    return export


def utf16_to_index(text: str) -> Callable[[int], Optional[int]]:
    """A function from an offset into ``text`` counted in UTF-16 code units to the index of the same place in
    the Python string; it gives None for an offset between the two halves of one character.

    Label Studio's editor is JavaScript, whose strings count UTF-16 code units: a character outside the Basic
    Multilingual Plane (an emoji such as 😀, a CJK Extension B character such as 𠀀) counts two there and one in
    Python, so each one shifts every later ``value.start`` and ``value.end`` by one (Label Studio issue #1347,
    https://github.com/HumanSignal/label-studio/issues/1347)."""
    astral = [i + k for k, i in enumerate(i for i, c in enumerate(text) if ord(c) > 0xFFFF)]  # their unit offsets
    if not astral:
        return lambda unit: unit

    def index(unit: int) -> Optional[int]:
        before = bisect_left(astral, unit)  # astral characters that start before ``unit``
        return None if before and astral[before - 1] + 1 == unit else unit - before

    return index


def _most_recent(annotations: list[dict]) -> dict:
    """The annotation last updated (``updated_at``, else ``created_at``); on a tie or without dates, the last one."""

    def when(i: int) -> tuple:
        return str(annotations[i].get("updated_at") or annotations[i].get("created_at") or ""), i

    return annotations[max(range(len(annotations)), key=when)]


def _text_key(data: dict, text_key: Optional[str], at: str, flag: str = "--text-column") -> str:
    """The key of ``data`` that holds the task's text: ``text_key``, else "text" (``flag`` names the key)."""
    key = text_key or "text"
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        found = ", ".join(data) or "none"
        raise UserError(
            f"{at}: no text under data.{key} (data keys: {found}); export a text labelling project (an image or "
            f"audio task has no text), or name the key that holds the text with {flag} (classify)"
        )
    return key


def _task_record(line: int, task: dict, text: str, result: list, at: str, counts: Counter, mismatched: list):
    """The class names, spans and relations of one annotation's ``result`` list; what is not read is counted."""
    labels, spans, regions, relations, unlabelled = [], [], {}, [], set()
    index = utf16_to_index(text)
    for item in result:
        kind = item.get("type") if isinstance(item, dict) else None
        value = item.get("value") if kind and isinstance(item.get("value"), dict) else {}
        if kind == "choices":
            labels += names(value.get("choices"))
        elif kind == "taxonomy":  # each a path of nodes: classification_rows joins them with --hierarchy-separator
            paths = [tuple(names(path)) for path in items(value.get("taxonomy")) if names(path)]
            counts["taxonomy paths"] += len(paths)
            labels += paths
        elif kind == "labels":
            types = names(value.get("labels"))
            place = _offsets(value, text, index, f"{at}: region {item.get('id')}", counts)
            if place is None:
                mismatched.append((at, item.get("id"), value, text))
            elif not types:
                counts["regions without a label"] += 1
                unlabelled.add(item.get("id"))
            else:
                for type_ in types:
                    span = (*place, str(type_))
                    counts["duplicate entities"] += span in spans
                    spans += [span] * (span not in spans)
                regions.setdefault(item.get("id"), (*place, str(types[0])))
        elif kind == "relation":
            relations.append(item)
        else:
            counts[f"other:{kind or 'no type'}"] += 1
    pairs, dangling, untyped = _relations(relations, regions, unlabelled, counts)
    spans, pairs = tuple(spans), tuple(pairs)
    return Annotated(line, str(task.get("id")), text, tuple(labels), spans, pairs, dangling=dangling, untyped=untyped)


def _offsets(value: dict, text: str, index, at: str, counts: Counter) -> Optional[tuple[int, int]]:
    """(start, end) of a region in ``text`` (Python indices), None when its ``value.text`` is not there.

    Offsets are UTF-16 code units, Label Studio's own rule (``utf16_to_index``); a region whose ``value.text``
    is found only by reading them as characters (code points, as some tools and Label Studio versions write
    them) is read that way. Without ``value.text``, UTF-16 it is."""
    start, end = value.get("start"), value.get("end")
    if not (isinstance(start, int) and isinstance(end, int)):
        raise UserError(f"{at} has no integer start and end character offsets")
    place = index(start), index(end)
    if "text" not in value:
        if None in place:
            raise UserError(
                f"{at}: offset [{start}, {end}) ends between the two UTF-16 halves of one character; Label Studio "
                "counts UTF-16 code units: was data.text edited after labelling?"
            )
        return place
    if None not in place and text[place[0] : place[1]] == value["text"]:
        return place
    if text[start:end] == value["text"]:
        counts["code points"] += 1
        return start, end
    return None


def _relations(relations: list, regions: dict, unlabelled: set, counts: Counter) -> tuple[list, tuple, tuple]:
    """(triples (head span, tail span, label), ids of relations naming no region, ids of relations without a
    label). A relation's ``direction`` "left" points from to_id to from_id; "bi" is read both ways."""
    pairs, dangling, untyped = [], [], []
    for r in relations:
        ends = (r.get("from_id"), r.get("to_id"))
        if not set(ends) <= set(regions):
            if set(ends) <= set(regions) | unlabelled:
                counts["relations to a region without a label"] += 1
            else:
                dangling.append(str(r.get("id")))
            continue
        head, tail = regions[ends[0]], regions[ends[1]]
        if r.get("direction") == "left":
            head, tail = tail, head
        predicates = names(r.get("labels"))
        if not predicates:
            counts["relations without a label"] += 1
            untyped.append(str(r.get("id")))
        counts["bidirectional relations"] += r.get("direction") == "bi"
        ways = [(head, tail), (tail, head)] if r.get("direction") == "bi" else [(head, tail)]
        for predicate in predicates:
            for triple in ((h, t, predicate) for h, t in ways):
                counts["duplicate relations"] += triple in pairs
                pairs += [triple] * (triple not in pairs)
    return pairs, tuple(dangling), tuple(untyped)


def _mismatch_message(mismatched: list) -> str:
    at, region, value, text = mismatched[0]
    start, end = value["start"], value["end"]
    place = utf16_to_index(text)(start), utf16_to_index(text)(end)
    there = text[start:end] if None in place else text[place[0] : place[1]]
    more = f" (and {len(mismatched) - 1} more regions)" if len(mismatched) > 1 else ""
    return (
        f"{at}: region {region}: entity {value['text']!r} at [{start}, {end}) but the text there is {there!r}, "
        f"counting offsets in UTF-16 units (Label Studio's rule) or in characters{more}; the offsets do not match "
        "the task's text (was data.text edited after labelling?)"
    )


def _ls_summary(records: list, counts: Counter, keys: set) -> str:
    notes = {
        "cancelled": ("cancelled annotation", "skipped"),
        "predicted": ("task", f"labelled by its predictions ({PREDICTIONS_FLAG})"),
        "taxonomy paths": ("label path", "from a <Taxonomy>"),
        "predictions only": ("task", f"with predictions only, read as unannotated ({PREDICTIONS_FLAG} takes them)"),
        "unannotated": ("task", "without annotations or predictions"),
        "code points": ("region", "whose offsets count characters, not UTF-16 units (as its value.text shows)"),
        "regions without a label": ("region", "without a label skipped"),
        "duplicate entities": ("labelled span", "given twice in one annotation (the same offsets and type) kept once"),
        "relations without a label": ("relation", "without a label not read"),
        "relations to a region without a label": ("relation", "to a region without a label skipped"),
        "bidirectional relations": ("bidirectional relation", "read both ways"),
        "duplicate relations": ("relation", "given twice kept once"),
    }
    parts = [f"{count(counts[key], noun)} {what}" for key, (noun, what) in notes.items() if counts[key]]
    other = sorted((k.split(":", 1)[1], n) for k, n in counts.items() if k.startswith("other:"))
    if other:
        kinds = ", ".join(f"{kind} {n}" for kind, n in other)
        parts.append(f"{count(sum(n for _, n in other), 'result')} of other kinds not read ({kinds})")
    keys_read = ", ".join(f"data.{k}" for k in sorted(keys))
    return (
        f"Label Studio JSON export, {count(records, 'task')}, text from {keys_read}; each task's most recent "
        f"non-cancelled annotation is used" + "".join(f"; {p}" for p in parts)
    )

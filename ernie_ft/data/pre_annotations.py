"""Predictions as annotation tools import them: Label Studio tasks with ``predictions`` and doccano JSONL.

A model's ``predict`` records become pre-annotations a person corrects instead of labelling from nothing. Each writer
takes one record as ``predict`` writes it, recognised by its keys: a classifier's (``label`` or ``labels``, with
``probs``), an NER model's (``entities`` with ``start``, ``end``, ``type``) or a relation model's (``relations``).
Reading the written file back (``annotations.load``; Label Studio's with ``--predictions-as-labels``) gives the same
labels: the tests check the round trip.

Label Studio (its JSON import): one task per text, ``{"data": {"text": ...}, "predictions": [{"model_version",
"score", "result": [...]}]}``; a class is a ``choices`` result, an entity a ``labels`` region with its own score, a
relation a ``relation`` result between two regions (a class may go to a ``<Taxonomy>`` instead, as a ``taxonomy``
result whose label paths are lists of their parts). Offsets are Label Studio's, counted in UTF-16 code units
(``label_studio.utf16_to_index`` reads them back). ``from_name`` and ``to_name`` are the names of the project's
control and object tags (``<Choices name="label" toName="text">``), and the keys of ``data`` the ones its ``<Text>``
tags show (a sentence pair's second text under a second key); the defaults are Label Studio's templates' (``text``,
and ``text_pair`` for a pair). ``label_config.LabelConfig`` reads all of them from a project's labelling config.

doccano (its JSONL import): classification ``{"text", "label": [names]}`` (a sentence pair's second text as
``text_pair``, which doccano keeps as the text's metadata), sequence labelling ``{"text", "label": [[start, end,
type], ...]}``, relations ``{"text", "entities": [{"id", "label", "start_offset", "end_offset"}],
"relations": [{"id", "from_id", "to_id", "type"}]}``; offsets in characters.
"""

from __future__ import annotations

from ernie_ft.errors import UserError

FORMATS = ("label-studio", "doccano")
"""The annotation tools ``predict --format`` writes for."""


def kind(record: dict) -> str:
    """What a ``predict`` record holds: 'classes', 'entities' or 'relations'; a UserError for any other."""
    if "relations" in record:
        return "relations"
    if "entities" in record:
        return "entities"
    if "labels" in record or "label" in record:
        return "classes"
    raise UserError(
        f"--format {'/'.join(FORMATS)} writes classification, NER and relation predictions; this model's records "
        f"({', '.join(record)}) are none of them: write JSON Lines (leave out --format)"
    )


def leaves(labels: list[str], separator: str | None = None) -> list[str]:
    """The predicted labels without the parents of label paths (``体育``, ``体育-篮球`` -> ``体育-篮球``): an annotation
    holds each path once, and reading it back adds the parents again."""
    if not separator:
        return list(labels)
    return [a for a in labels if not any(b.startswith(a + separator) for b in labels)]


def _classes(record: dict) -> tuple[list[str], float]:
    """(the predicted class names, the score: the lowest of their probabilities, 0 without any)."""
    names = record["labels"] if "labels" in record else [record["label"]] if record.get("label") is not None else []
    probs = record.get("probs", {})
    return list(names), round(min((probs.get(n, 0.0) for n in names), default=0.0), 6)


def _utf16(text: str, index: int) -> int:
    """The Python string index ``index`` of ``text`` as Label Studio counts it, in UTF-16 code units."""
    return index + sum(ord(c) > 0xFFFF for c in text[:index])


def _region(text: str, region_id: str, entity: dict, names: tuple[str, str]) -> dict:
    start, end = entity["start"], entity["end"]
    return {
        "id": region_id,
        "from_name": names[0],
        "to_name": names[1],
        "type": "labels",
        "value": {
            "start": _utf16(text, start),
            "end": _utf16(text, end),
            "text": text[start:end],
            "labels": [entity["type"]],
        },
        "score": entity.get("score"),
    }


def label_studio_task(
    record: dict,
    model_version: str,
    names: tuple[str, str] = ("label", "text"),
    separator: str | None = None,
    taxonomy: bool = False,
    fields: tuple[str, ...] = ("text", "text_pair"),
) -> dict:
    """One Label Studio task with the record's prediction; ``names``: (from_name, to_name) of the project's tags;
    ``separator``: the label paths' separator (only their ends are written); ``taxonomy``: classes as a
    ``<Taxonomy>`` result (each label a path of its parts: ``体育-篮球`` -> ``["体育", "篮球"]``) instead of
    ``<Choices>``; ``fields``: the keys of the task's ``data`` for the text and a sentence pair's second text
    (``label_config.text_fields``)."""
    what, text = kind(record), record["text"]
    result, scores = [], []
    if what == "classes":
        chosen, score = _classes(record)
        chosen = leaves(chosen, separator)
        if chosen:
            paths = [c.split(separator) if separator else [c] for c in chosen]
            value = {"taxonomy": paths} if taxonomy else {"choices": chosen}
            result.append({"from_name": names[0], "to_name": names[1], "type": next(iter(value)), "value": value})
        scores.append(score)
    elif what == "entities":
        for k, entity in enumerate(record["entities"]):
            result.append(_region(text, f"e{k}", entity, names))
            scores.append(entity.get("score", 0.0))
    else:
        regions: dict[tuple, str] = {}

        def region_of(entity: dict) -> str:
            key = (entity["start"], entity["end"], entity["type"])
            if key not in regions:
                regions[key] = f"e{len(regions)}"
                result.append(_region(text, regions[key], entity, names))
            return regions[key]

        for relation in record["relations"]:
            subject, obj = region_of(relation["subject"]), region_of(relation["object"])
            result.append(
                {
                    "from_id": subject,
                    "to_id": obj,
                    "type": "relation",
                    "direction": "right",
                    "labels": [relation["predicate"]],
                }  # fmt: skip
            )
            scores.append(relation.get("score", 0.0))
    prediction = {"model_version": model_version, "score": round(min(scores, default=0.0), 6), "result": result}
    return {"data": _data(record, fields), "predictions": [prediction]}


def _data(record: dict, fields: tuple[str, ...]) -> dict:
    """A task's ``data``: the record's text, and a sentence pair's second text (``text_pair``), under ``fields``."""
    texts = [record["text"]] + ([record["text_pair"]] if record.get("text_pair") is not None else [])
    if len(fields) < len(texts):
        raise UserError(
            "this sentence-pair model's tasks hold two texts, the labelling config shows one: add a second <Text> "
            "tag to the project's config (and to --label-config)"
        )
    return dict(zip(fields, texts))


def doccano_record(record: dict, separator: str | None = None) -> dict:
    """One doccano JSONL record with the record's prediction as its labels."""
    what, text = kind(record), record["text"]
    if what == "classes":  # a sentence pair's second text goes with it: doccano keeps other keys as the text's meta
        return {**_data(record, ("text", "text_pair")), "label": leaves(_classes(record)[0], separator)}
    if what == "entities":
        return {"text": text, "label": [[e["start"], e["end"], e["type"]] for e in record["entities"]]}
    entities, relations, ids = [], [], {}
    for relation in record["relations"]:
        ends = []
        for entity in (relation["subject"], relation["object"]):
            key = (entity["start"], entity["end"], entity["type"])
            if key not in ids:
                ids[key] = len(ids) + 1
                entities.append({"id": ids[key], "label": entity["type"], "start_offset": key[0], "end_offset": key[1]})
            ends.append(ids[key])
        relations.append(
            {"id": len(relations) + 1, "from_id": ends[0], "to_id": ends[1], "type": relation["predicate"]}
        )
    return {"text": text, "entities": entities, "relations": relations}

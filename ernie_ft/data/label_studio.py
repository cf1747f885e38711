"""Label Studio's JSON export: each task's most recent non-cancelled annotation (else its predictions) as one
``Annotated`` (its ``choices``, its labelled regions as spans, the relations between them), and the summary the
loading line shows. ``annotations.load`` recognises the file and calls ``read_label_studio``."""

from __future__ import annotations

from typing import Optional

from ernie_ft.data.annotated import Annotated, Export, count, items, names
from ernie_ft.errors import UserError


def read_label_studio(tasks: list, where: str, text_key: Optional[str]) -> Export:
    records, counts = [], {"cancelled": 0, "predicted": 0, "unannotated": 0, "keys": set()}
    for line, task in tasks:
        at = f"{where}:{line}: task {task.get('id', '?') if isinstance(task, dict) else '?'}"
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
            raise UserError(f'{at}: not a Label Studio task (an object with "data" and "annotations")')
        key = _text_key(task["data"], text_key, at)
        counts["keys"].add(key)
        text = task["data"][key]
        annotations = [a for a in items(task.get("annotations")) if isinstance(a, dict)]
        done = [a for a in annotations if not a.get("was_cancelled")]
        counts["cancelled"] += len(annotations) - len(done)
        if not done and items(task.get("predictions")):
            done = [p for p in items(task["predictions"]) if isinstance(p, dict)]
            counts["predicted"] += 1
        if not done:
            counts["unannotated"] += 1
            records.append(Annotated(line, str(task.get("id")), text, labelled=False))
            continue
        records.append(_task_record(line, task, text, items(_most_recent(done).get("result")), at))
    return Export("Label Studio", records, _ls_summary(records, counts), text_key or "text")


def _most_recent(annotations: list[dict]) -> dict:
    """The annotation last updated (``updated_at``, else ``created_at``); on a tie or without dates, the last one."""

    def when(i: int) -> tuple:
        return str(annotations[i].get("updated_at") or annotations[i].get("created_at") or ""), i

    return annotations[max(range(len(annotations)), key=when)]


def _text_key(data: dict, text_key: Optional[str], at: str) -> str:
    """The key of ``data`` that holds the task's text: ``text_key``, else "text"."""
    key = text_key or "text"
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        found = ", ".join(data) or "none"
        raise UserError(
            f"{at}: no text under data.{key} (data keys: {found}); export a text labelling project (an image or "
            "audio task has no text), or name the key that holds the text with --text-column (classify)"
        )
    return key


def _task_record(line: int, task: dict, text: str, result: list, at: str) -> Annotated:
    """The class names, spans and relations of one annotation's ``result`` list."""
    labels, spans, regions, relations = [], [], {}, []
    for item in result:
        if not isinstance(item, dict):
            continue
        kind, value = item.get("type"), item.get("value") if isinstance(item.get("value"), dict) else {}
        if kind == "choices":
            labels += names(value.get("choices"))
        elif kind == "labels":
            start, end = value.get("start"), value.get("end")
            if not (isinstance(start, int) and isinstance(end, int)):
                raise UserError(f"{at}: region {item.get('id')} has no integer start and end character offsets")
            if "text" in value and text[start:end] != value["text"]:
                raise UserError(
                    f"{at}: entity {value['text']!r} at [{start}, {end}) but the text there is {text[start:end]!r}; "
                    "the offsets do not match the task's text (was data.text edited after labelling?)"
                )
            for type_ in names(value.get("labels")):
                spans.append((start, end, str(type_)))
                regions.setdefault(item.get("id"), spans[-1])
        elif kind == "relation":
            relations.append(item)
    pairs = [
        (regions[r["from_id"]], regions[r["to_id"]], ",".join(names(r.get("labels"))))
        for r in relations
        if r.get("from_id") in regions and r.get("to_id") in regions
    ]
    dangling = tuple(str(r.get("id")) for r in relations if not {r.get("from_id"), r.get("to_id")} <= set(regions))
    return Annotated(line, str(task.get("id")), text, tuple(labels), tuple(spans), tuple(pairs), dangling=dangling)


def _ls_summary(records: list, counts: dict) -> str:
    parts = [f"{counts['cancelled']} cancelled annotations skipped"] if counts["cancelled"] else []
    if counts["predicted"]:
        parts.append(f"{counts['predicted']} tasks labelled by their predictions (no annotation)")
    if counts["unannotated"]:
        parts.append(f"{counts['unannotated']} tasks without annotations or predictions")
    keys = ", ".join(f"data.{k}" for k in sorted(counts["keys"]))
    return (
        f"Label Studio JSON export, {count(records, 'task')}, text from {keys}; each task's most recent non-cancelled "
        f"annotation is used" + "".join(f"; {p}" for p in parts)
    )

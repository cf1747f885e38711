"""A Label Studio project's labelling config, read for where a model's predictions go, and the one rule for which
keys of a task's ``data`` hold its text.

The text comes from the ``<Text value="$field">`` tags (``text_fields``): a model of one text reads the one that the
config's control tag labels (the first ``<Text>`` without one), a sentence-pair model the first two ``<Text>`` tags
in their order, its ``text`` and ``text_pair``. Classes go to the config's ``<Choices>`` or ``<Taxonomy>`` (a label
path as the list of its parts), entities and relation ends to its ``<Labels>``, relations between them as
``relation`` results with the labels of its ``<Relations>``; a label the config does not offer is left out and
counted (``LabelConfig.keep``), so a project never receives a value it cannot show. ``serve``'s ``/label-studio``
routes, ``predict --label-config`` and ``select --label-config`` all write through ``LabelConfig.task``, and a
Label Studio export read for retraining names its text the same way.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

from ernie_ft.data.pre_annotations import label_studio_task

OBJECT_TAGS = ("Text", "HyperText", "Paragraphs")
"""Label Studio's tags that show a task's text: the one whose ``value`` is ``$field`` names where the text is."""
CONTROLS = {"classes": ("Choices", "Taxonomy"), "entities": ("Labels",), "relations": ("Labels",)}
"""The control tags that take each kind of prediction (``pre_annotations.kind``)."""
PAIR = ("text", "text_pair")
"""A sentence pair's two texts as ``predict``'s records and ``serve``'s inputs name them."""


class ConfigError(ValueError):
    """A labelling config that cannot take this model's predictions: the message says what it lacks."""


class MissingText(ConfigError):
    """A task without a text its labelling config shows (``task_record``): ``where`` names it (``task.data.review``)."""

    def __init__(self, where: str):
        super().__init__(f"{where}: missing: the labelling config's <Text> shows it")
        self.where = where


def _root(xml: str):
    try:
        return ElementTree.fromstring(xml)
    except ElementTree.ParseError as e:
        raise ConfigError(f"the labelling config is not XML ({e})") from None


def _texts(root) -> dict[str, str]:
    """{object tag name: the data field it shows}, in the config's order (at least one, else ConfigError)."""
    objects = [(t.get("name"), t.get("value", "")) for t in root.iter() if t.tag in OBJECT_TAGS and t.get("name")]
    texts = {name: value[1:] for name, value in objects if value.startswith("$")}
    if not texts:
        raise ConfigError('the labelling config has no <Text name="..." value="$field"> tag for the text')
    return texts


def text_fields(xml: str, texts: int = 1) -> tuple[str, ...]:
    """The keys of a task's ``data`` that hold a model's ``texts`` texts in the labelling config ``xml``: for one,
    the field of the ``<Text>`` the first control tag (``<Choices>``, ``<Taxonomy>``, ``<Labels>``) labels, else of
    the first ``<Text>``; for a sentence pair (2), the first two ``<Text>`` tags' in their order. A config that is
    not XML, shows no text or fewer texts than the model reads is a ConfigError."""
    root = _root(xml)
    shown = _texts(root)
    if texts > 1:
        if len(shown) < texts:
            raise ConfigError(
                f"the labelling config shows {len(shown)} text (data.{next(iter(shown.values()))}); this sentence-pair "
                f'model reads {texts}: add a second tag such as <Text name="text_pair" value="$text_pair"/>'
            )
        return tuple(list(shown.values())[:texts])
    tags = {tag for tags in CONTROLS.values() for tag in tags}
    labelled = next((t.get("toName") for t in root.iter() if t.tag in tags and t.get("toName") in shown), None)
    return (shown[labelled] if labelled else next(iter(shown.values())),)


def task_text_fields(xml: Optional[str], tasks: Sequence = (), texts: int = 1) -> tuple[str, ...]:
    """The keys of Label Studio tasks' ``data`` that hold a model's ``texts`` texts (2: a sentence pair's ``text`` and
    ``text_pair``): the labelling config's (``text_fields``) when ``xml`` is one that shows them; else, from the
    ``tasks`` themselves, ``text`` (and ``text_pair``) when their data has those keys or does not hold exactly
    ``texts`` string fields, else those fields in the order the tasks give them. Retraining reads an export by it,
    as ``serve`` answers the project's tasks."""
    if xml:
        try:
            return text_fields(xml, texts)
        except ConfigError:
            pass
    keys = {}  # an ordered set
    for task in tasks:
        data = task.get("data") if isinstance(task, dict) else None
        keys.update((k, None) for k, v in (data if isinstance(data, dict) else {}).items() if isinstance(v, str))
    wanted = PAIR[:texts]
    return wanted if set(wanted) <= set(keys) or len(keys) != texts else tuple(keys)


def task_record(task, fields: tuple[str, ...], inputs: tuple[str, ...] = PAIR, where: str = "task") -> dict:
    """The input record of the Label Studio ``task`` for a model whose text inputs are ``inputs``: each
    ``data[fields[k]]`` (``text_fields``) under ``inputs[k]``. A field missing or not a string is a MissingText
    naming ``where``'s ``data.FIELD``."""
    data = task.get("data") if isinstance(task, dict) else None
    record = {}
    for name, key in zip(inputs, fields):
        value = data.get(key) if isinstance(data, dict) else None
        if not isinstance(value, str):
            raise MissingText(f"{where}.data.{key}")
        record[name] = value
    return record


@dataclass
class LabelConfig:
    """What a project's labelling config says about where predictions go."""

    fields: tuple
    """The keys of a task's ``data`` that hold its text(s) (``text_fields``): ``("review",)`` for
    ``<Text value="$review">``."""
    to_name: str
    """The name of the object tag the control labels."""
    from_name: str
    """The name of the control tag that takes the predictions."""
    values: set = field(default_factory=set)
    """The labels (choices) the control offers, a ``<Taxonomy>``'s as paths (tuples of their parts); empty: any."""
    taxonomy: bool = False
    """The control is a ``<Taxonomy>``: classes are written as ``taxonomy`` results."""
    relations: Optional[set] = None
    """The labels of the config's ``<Relations>``; None without one (a relation's labels are then kept)."""

    @classmethod
    def parse(cls, xml: str, what: str, texts: int = 1) -> LabelConfig:
        """The config ``xml`` read for predictions of ``what`` ('classes', 'entities', 'relations') by a model of
        ``texts`` texts (2: a sentence pair)."""
        root, fields = _root(xml), text_fields(xml, texts)
        on = {name for name, key in _texts(root).items() if key in fields}  # the tags that show the model's texts
        controls = [t for t in root.iter() if t.tag in CONTROLS[what] and t.get("toName") in on]
        if not controls:
            tags = " or ".join(f"<{tag}>" for tag in CONTROLS[what])
            where = " or ".join(f"data.{key}" for key in fields)
            raise ConfigError(f"the labelling config has no {tags} tag on its text ({where}) for this model's {what}")
        control = controls[0]
        taxonomy = control.tag == "Taxonomy"
        offered = {v.get("value") for v in control.iter() if v.tag in ("Choice", "Label")}
        values = _paths(control) if taxonomy else offered
        relations = None
        if what == "relations":
            tags = [t for t in root.iter() if t.tag == "Relations"]
            relations = {r.get("value") for t in tags for r in t.iter("Relation")} if tags else None
        return cls(fields, control.get("toName"), control.get("name"), values - {None}, taxonomy, relations)

    def task(self, record: dict, model_version: str, separator: Optional[str] = None) -> tuple[dict, int]:
        """(the Label Studio task of ``predict``'s ``record`` in this config's names, with its prediction; how many
        labels the config does not offer were left out). ``separator``: the model's label paths' separator."""
        names = (self.from_name, self.to_name)
        task = label_studio_task(record, model_version, names, separator, self.taxonomy, self.fields)
        prediction = task["predictions"][0]
        prediction["result"], dropped = self.keep(prediction["result"])
        return task, dropped

    def keep(self, result: list) -> tuple[list, int]:
        """(``result`` without the labels the config does not offer, how many were left out); a relation whose end
        was left out goes too."""
        kept, dropped, gone = [], 0, set()
        for item in result:
            value = item.get("value", {})
            if item["type"] in ("choices", "taxonomy") and self.values:
                key = item["type"]
                chosen = [c for c in value[key] if (tuple(c) if self.taxonomy else c) in self.values]
                dropped += len(value[key]) - len(chosen)
                if chosen:
                    kept.append({**item, "value": {key: chosen}})
            elif item["type"] == "labels" and self.values and not set(value["labels"]) <= self.values:
                dropped += 1
                gone.add(item["id"])
            elif item["type"] == "relation" and {item["from_id"], item["to_id"]} & gone:
                dropped += 1
            elif item["type"] == "relation" and self.relations is not None:
                labels = [label for label in item["labels"] if label in self.relations]
                dropped += len(item["labels"]) - len(labels)
                if labels:
                    kept.append({**item, "labels": labels})
            else:
                kept.append(item)
        return kept, dropped


def _paths(taxonomy) -> set:
    """Every node of a ``<Taxonomy>``'s nested ``<Choice>`` tags as the path to it: {("体育",), ("体育", "篮球")}."""
    paths = set()

    def walk(tag, above: tuple) -> None:
        for choice in tag.findall("Choice"):
            path = (*above, choice.get("value") or choice.get("alias"))
            paths.add(path)
            walk(choice, path)

    walk(taxonomy, ())
    return paths


def texts_of(record: dict) -> int:
    """How many texts a ``predict`` record holds: 2 for a sentence pair's (``text_pair``), else 1."""
    return 2 if record.get(PAIR[1]) is not None else 1

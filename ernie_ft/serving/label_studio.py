"""Label Studio's ML backend protocol under ``/label-studio``: a project's backend URL is ``http://HOST:PORT/label-studio``.

Label Studio calls ``GET /health`` when a backend is connected, ``POST /setup`` with the project's labelling config
(``schema``), and, for "Retrieve predictions" or as tasks are opened, ``POST /predict`` with ``{"tasks": [...],
"label_config": ...}``; it stores each returned ``{"result": [...], "score", "model_version"}`` as the task's
prediction. The results use the project's own names, read from its labelling config (``LabelConfig``): the text
comes from the ``<Text value="$field">`` tag, classes go to its ``<Choices>`` or ``<Taxonomy>`` (a label path as the
list of its parts), entities (nested ones too: regions may overlap) and relation ends to its ``<Labels>``, relations
between them as ``relation`` results with the labels of its ``<Relations>``; a label the config does not offer is
left out and counted on the server's standard error, so a project never receives a value it cannot show.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from typing import Optional

from ernie_ft.data.pre_annotations import kind, label_studio_task

OBJECT_TAGS = ("Text", "HyperText", "Paragraphs")
"""Label Studio's tags that show a task's text: the one whose ``value`` is ``$field`` names where the text is."""
CONTROLS = {"classes": ("Choices", "Taxonomy"), "entities": ("Labels",), "relations": ("Labels",)}
"""The control tags that take each kind of prediction (``pre_annotations.kind``)."""


class ConfigError(ValueError):
    """A labelling config that cannot take this model's predictions: the message says what it lacks."""


@dataclass
class LabelConfig:
    """What a project's labelling config says about where predictions go."""

    field: str
    """The key of a task's ``data`` that holds the text (``<Text value="$text">``: 'text')."""
    to_name: str
    """The name of that object tag."""
    from_name: str
    """The name of the control tag that takes the predictions."""
    values: set = field(default_factory=set)
    """The labels (choices) the control offers, a ``<Taxonomy>``'s as paths (tuples of their parts); empty: any."""
    taxonomy: bool = False
    """The control is a ``<Taxonomy>``: classes are written as ``taxonomy`` results."""
    relations: Optional[set] = None
    """The labels of the config's ``<Relations>``; None without one (a relation's labels are then kept)."""

    @staticmethod
    def texts(xml: str) -> dict[str, str]:
        """{object tag name: the data field it shows} of the config ``xml`` (at least one, else ConfigError)."""
        try:
            root = ElementTree.fromstring(xml)
        except ElementTree.ParseError as e:
            raise ConfigError(f"the labelling config is not XML ({e})") from None
        objects = {t.get("name"): t.get("value", "") for t in root.iter() if t.tag in OBJECT_TAGS and t.get("name")}
        texts = {name: value[1:] for name, value in objects.items() if value.startswith("$")}
        if not texts:
            raise ConfigError('the labelling config has no <Text name="..." value="$field"> tag for the text')
        return texts

    @classmethod
    def parse(cls, xml: str, what: str) -> LabelConfig:
        """The config ``xml`` read for predictions of ``what`` ('classes', 'entities', 'relations')."""
        texts, root = cls.texts(xml), ElementTree.fromstring(xml)
        controls = [t for t in root.iter() if t.tag in CONTROLS[what] and t.get("toName") in texts]
        if not controls:
            tags = " or ".join(f"<{tag}>" for tag in CONTROLS[what])
            raise ConfigError(f"the labelling config has no {tags} tag on its text for this model's {what}")
        control = controls[0]
        taxonomy = control.tag == "Taxonomy"
        offered = {v.get("value") for v in control.iter() if v.tag in ("Choice", "Label")}
        values = _paths(control) if taxonomy else offered
        relations = None
        if what == "relations":
            tags = [t for t in root.iter() if t.tag == "Relations"]
            relations = {r.get("value") for t in tags for r in t.iter("Relation")} if tags else None
        field_name = texts[control.get("toName")]
        return cls(field_name, control.get("toName"), control.get("name"), values - {None}, taxonomy, relations)

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


@dataclass
class Projects:
    """The labelling configs the backend was set up with, by project (``POST /setup``)."""

    configs: dict = field(default_factory=dict)

    def config(self, project, given: Optional[str]) -> Optional[str]:
        if given:
            self.configs[project] = given
        return self.configs.get(project)


def answer_tasks(
    records: list[dict], xml: str, model_version: str, separator: Optional[str] = None
) -> tuple[list, int]:
    """(one ``{"result", "score", "model_version"}`` per task from its ``predict`` record, in the names of the
    labelling config ``xml``; how many labels the config does not offer were left out). ``separator``: the model's
    label paths' separator (``--hierarchy-separator``), None without label paths."""
    if not records:
        return [], 0
    config = LabelConfig.parse(xml, kind(records[0]))
    names = (config.from_name, config.to_name)
    results, dropped = [], 0
    for record in records:
        prediction = label_studio_task(record, model_version, names, separator, config.taxonomy)["predictions"][0]
        prediction["result"], left_out = config.keep(prediction["result"])
        dropped += left_out
        results.append(prediction)
    return results, dropped

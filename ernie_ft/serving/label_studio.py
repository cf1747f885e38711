"""Label Studio's ML backend protocol under ``/label-studio``: a project's backend URL is ``http://HOST:PORT/label-studio``.

Label Studio calls ``GET /health`` when a backend is connected, ``POST /setup`` with the project's labelling config
(``schema``), and, for "Retrieve predictions" or as tasks are opened, ``POST /predict`` with ``{"tasks": [...],
"label_config": ...}``; it stores each returned ``{"result": [...], "score", "model_version"}`` as the task's
prediction. The results use the project's own names, read from its labelling config (``data.label_config``, as
``predict`` and ``select`` read ``--label-config``): the text from its ``<Text value="$field">`` tag (a sentence
pair's two texts from its first two), classes to its ``<Choices>`` or ``<Taxonomy>``, entities (nested ones too:
regions may overlap) and relation ends to its ``<Labels>``, relations to its ``<Relations>``; a label the config does
not offer is left out and counted on the server's standard error, so a project never receives a value it cannot
show.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ernie_ft.data.label_config import ConfigError, LabelConfig, texts_of
from ernie_ft.data.pre_annotations import kind

__all__ = ["ConfigError", "LabelConfig", "Projects", "answer_tasks"]  # the config's reading: data.label_config


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
    labelling config ``xml`` (``LabelConfig.task``); how many labels the config does not offer were left out).
    ``separator``: the model's label paths' separator (``--hierarchy-separator``), None without label paths."""
    if not records:
        return [], 0
    config = LabelConfig.parse(xml, kind(records[0]), texts_of(records[0]))
    results, dropped = [], 0
    for record in records:
        task, left_out = config.task(record, model_version, separator)
        dropped += left_out
        results.append(task["predictions"][0])
    return results, dropped

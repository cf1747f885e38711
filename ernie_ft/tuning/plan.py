"""What every trial of a search shares: the task, the flags as given (a recipe), and a trial's settings on top.

A trial's run is a recipe, ``--config``'s format (``recipes.build_config``): the given settings, its sampled
parameters in their sections. The worker process trains from it, and ``DIR/best.yaml`` is the best trial's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ernie_ft.config import RunConfig, learning_rate
from ernie_ft.errors import UserError
from ernie_ft.recipes import SECTIONS, build_config, changed
from ernie_ft.task import create_task, task_options, unused_data_settings

MULTI_PROCESS = ("nproc", "gpus", "ips", "nnodes", "master", "node_rank")


@dataclass
class Plan:
    """The search's fixed part: the task ``spec`` (its class ``task_cls``) and the given settings as a recipe."""

    spec: str
    task_cls: Any
    recipe: dict
    """{section: {setting: value}}: what the flags (and their --config) set, without --output."""

    @classmethod
    def from_config(cls, spec: str, task_cls, config: RunConfig) -> Plan:
        """The plan of ``config`` (the flags parsed as the task's training command parses them)."""
        if any(getattr(config.parallel, name) not in (None, 1) for name in MULTI_PROCESS):
            raise UserError(
                "tune runs each trial as one process: --nproc, --gpus, --ips and --nnodes do not apply "
                "(--workers N runs N trials side by side, the cores split between them)"
            )
        if config.parallel.tensor_parallel != 1:
            raise UserError("tune runs each trial as one process: --tensor-parallel does not apply")
        if config.resume or config.overwrite:
            raise UserError(
                "tune continues its study by itself (run the same command again): --resume and --overwrite do not "
                "apply; choose another --output for a new study"
            )
        if not task_cls.reads_corpus and not (config.data.dev or config.data.dev_split):
            raise UserError("tune scores each trial on dev: give --dev FILE or --dev-split FRACTION")
        recipe = {}
        for section in SECTIONS:
            values = dataclasses.asdict(getattr(config, section))
            values.pop("output", None)
            given = changed(section, values)
            if section == "model":  # always: a recipe names what it trains
                given = {"model": values["model"], **given}
            if given:
                recipe[section] = given
        if config.task:
            recipe["task"] = dict(config.task)
        return cls(spec, task_cls, recipe)

    def recipe_with(self, settings: dict) -> dict:
        """The recipe of a trial: the given settings with ``settings`` (name -> value) in their sections."""
        fields = {f.name: "task" for f in task_options(self.task_cls)}
        for section, klass in SECTIONS.items():
            fields.update({f.name: section for f in dataclasses.fields(klass)})
        recipe = {section: dict(values) for section, values in self.recipe.items()}
        for name, value in settings.items():
            recipe.setdefault(fields[name], {})[name] = value
        return recipe

    def config(self, settings: dict | None = None, **overrides) -> RunConfig:
        """The RunConfig of a trial with ``settings``, checked as the training command checks it (the task's
        options by the task itself); ``overrides``: flags on top (``output``, ``threads``)."""
        config = build_config(
            self.recipe_with(settings or {}),
            overrides,
            source="--space" if settings else "flags",
            task_fields=task_options(self.task_cls),
            unused_data=unused_data_settings(self.task_cls),
        )
        create_task(self.task_cls, config.task, self.spec)
        return config

    def metric(self) -> str:
        """The dev metric trials are scored on: --metric, else the task's (its options may change it)."""
        config = self.config()
        return config.train.metric or create_task(self.task_cls, config.task, self.spec).metric

    def given(self, name: str) -> Any:
        """The value trial 0 runs with for the setting ``name``: as given, or the default (the learning rate's
        depends on the model); UserError where a setting has no value to start from."""
        config = self.config()
        if name == "lr":
            return learning_rate(config)[0]
        value = config.task.get(name) if name in config.task else _field_value(config, name, self.task_cls)
        if value is None:
            flag = "--" + name.replace("_", "-")
            raise UserError(
                f"--space {name}: trial 0 runs the flags as given, and {flag} has no value: give {flag} VALUE too"
            )
        return value


def _field_value(config: RunConfig, name: str, task_cls) -> Any:
    for section in SECTIONS:
        values = getattr(config, section)
        if hasattr(values, name):
            return getattr(values, name)
    defaults = {f.name: f.default for f in task_options(task_cls)}
    return defaults.get(name)

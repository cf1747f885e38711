"""A run's configuration from a YAML recipe and command-line overrides: ``build_config`` and ``load_recipe``, and
what the flags are generated from (each field's docstring, flag name and type).

Precedence: dataclass defaults < recipe (``--config recipe.yaml``) < flags. Unknown keys in
a recipe are errors that suggest the closest valid name. Nothing here imports paddle.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import math
import os
import textwrap
from typing import Any

from ernie_ft.config import DataConfig, ModelConfig, ParallelConfig, RunConfig, TrainConfig
from ernie_ft.errors import UserError

SECTIONS = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig, "parallel": ParallelConfig}
TOP_LEVEL = ("resume", "overwrite")


@functools.cache
def field_docs(cls) -> dict:
    """Field name -> the docstring written under it in the class body, or in the body of the dataclass it inherits
    the field from (a subclass's own docstring wins)."""
    docs = {}
    for klass in reversed(cls.__mro__):
        if klass is cls or (dataclasses.is_dataclass(klass) and "__dataclass_fields__" in vars(klass)):
            docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls) -> dict:
    """Field name -> docstring for the fields written in ``cls``'s own body."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def suggest(name: str, choices) -> str:
    """' Did you mean X?' for the closest valid name, or ''."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" Did you mean {close[0]}?" if close else ""


def flag_name(name: str) -> str:
    """A field's command-line flag: ``max_len`` -> ``--max-len`` (the flags ``cli.parsers`` generates)."""
    return "--" + name.replace("_", "-")


def type_name(f: dataclasses.Field) -> str:
    """A field's annotation as written ('Optional[int]'), whether or not annotations are postponed."""
    return f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))


def _coerce(value: Any, annotation: str, key: str) -> Any:
    """Convert a YAML or command-line value to the field's declared type."""
    base = annotation.replace("Optional[", "").rstrip("]")
    if value is None:
        if annotation.startswith("Optional"):
            return None
        raise UserError(f"{key} cannot be empty")
    try:
        if base == "bool":
            if isinstance(value, bool):
                return value
            lowered = str(value).lower()
            if lowered in ("true", "yes", "1", "on"):
                return True
            if lowered in ("false", "no", "0", "off"):
                return False
            raise ValueError
        if base == "int":
            number = float(value)
            if not number.is_integer():
                raise ValueError
            return int(number)
        if base == "float":
            number = float(value)
            if math.isnan(number):
                raise ValueError
            return number
        if isinstance(value, dict):  # a recipe's mapping, e.g. label_names: {0: 负面, 1: 正面}
            return ",".join(f"{k}={v}" for k, v in value.items())
        if isinstance(value, (list, tuple)):  # several files (--corpus a.txt b.txt, or a YAML list)
            return os.pathsep.join(str(v) for v in value)
        return str(value)
    except (TypeError, ValueError):
        raise UserError(f"{key}: expected {base}, got {value!r}") from None


def build_config(
    recipe: dict, overrides: dict, source: str = "--config", task_fields=(), unused_data: dict | None = None
) -> RunConfig:
    """A validated RunConfig from a recipe ({section: {key: value}}) and flat flag overrides.

    Flat keys in ``overrides`` (``max_len``, ``lr``...) are routed to the section that owns them;
    ``task_fields`` (the task's option fields, see ``task.task_options``) form the ``task`` section.
    ``unused_data`` maps the data settings the task never reads to why: a recipe setting one is an
    error rather than a setting silently ignored.
    """
    fields = {name: {f.name: f for f in dataclasses.fields(cls)} for name, cls in SECTIONS.items()}
    fields["task"] = {f.name: f for f in task_fields}
    values = {name: {} for name in fields}
    top = {}
    owner = {key: section for section, known in fields.items() for key in known}
    for key, value in (recipe or {}).items():
        if key in fields:
            if not isinstance(value, dict):
                raise UserError(f"{source}: section '{key}' must be a mapping of settings")
            for sub, sub_value in value.items():
                if sub not in fields[key]:
                    raise UserError(f"{source}: unknown setting '{key}.{sub}'.{suggest(sub, fields[key])}")
                if key == "data" and sub in (unused_data or {}):
                    raise UserError(
                        f"{source}: 'data.{sub}' does not apply to this command ({unused_data[sub]}); remove it"
                    )
                values[key][sub] = sub_value
        elif key in TOP_LEVEL:
            top[key] = value
        else:
            hint = (
                f" It belongs under '{owner[key]}:'." if key in owner else suggest(key, list(fields) + list(TOP_LEVEL))
            )
            raise UserError(f"{source}: unknown setting '{key}'.{hint}")
    for key, value in overrides.items():
        if key in TOP_LEVEL:
            top[key] = value
        else:
            values[owner[key]][key] = value

    sections = {}
    for name, known in fields.items():
        sections[name] = {
            key: _coerce(value, type_name(known[key]), f"--{key.replace('_', '-')}")
            for key, value in values[name].items()
        }
    task = sections.pop("task")
    return RunConfig(
        **{name: SECTIONS[name](**kwargs) for name, kwargs in sections.items()},
        task=task,
        **{k: _coerce(v, "bool", f"--{k}") for k, v in top.items()},
    )


def changed(section: str, values: dict) -> dict:
    """The settings of a run config's ``section`` (``values``: name -> value) that differ from their defaults, the
    ones a recipe names (a task refuses a data setting it does not read, even one left at its default); a section
    of no dataclass (``task``) whole."""
    if section not in SECTIONS:
        return dict(values)
    fields = dataclasses.fields(SECTIONS[section])
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    return {k: v for k, v in values.items() if k not in defaults or defaults[k] != v}


def load_recipe(path: str) -> dict:
    """Parse a YAML recipe; a missing file or bad YAML is a UserError."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            recipe = yaml.safe_load(f)
    except FileNotFoundError:
        raise UserError(f"--config: {path} not found") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise UserError(f"--config: {path}{where}: not valid YAML ({getattr(e, 'problem', e)})") from None
    if recipe is None:
        return {}
    if not isinstance(recipe, dict):
        raise UserError(f"--config: {path} must hold a mapping with data:, model: and train: sections")
    return recipe

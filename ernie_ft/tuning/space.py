"""The search space of ``tune --space``: ``lr=1e-5..1e-2:log,epochs=1..5,batch_size=16|32,warmup=0..0.2`` parsed
against a task's real settings, each bound and choice checked as the flag itself checks it, and the default space
of each task.

A name is a run setting or a task option (``batch_size`` or ``batch-size``); ``LOW..HIGH`` is a range of the
setting's type (whole numbers for an int), ``:log`` samples it on a log scale, ``A|B|C`` are choices. Nothing here
imports Optuna or Paddle: a ``Param`` asks a trial for its value through the trial's own ``suggest_*`` methods.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ernie_ft.config import RunConfig
from ernie_ft.errors import UserError
from ernie_ft.recipes import SECTIONS, flag_name, suggest, type_name

NOT_SEARCHED = {
    "output": "each trial writes its own DIR/trial-NNN",
    "train": "the data are the same in every trial",
    "dev": "the data are the same in every trial",
    "test": "the data are the same in every trial",
    "metric": "it is the objective: every trial is scored on the same one",
    "device": "the trials run where tune runs them",
    "threads": "tune splits the cores among --workers",
}
"""Settings a space may not vary, each with why."""

LR_RANGES = {"scratch": (1e-4, 1e-2), "pretrained": (1e-5, 2e-4)}
"""The default space's learning rates: around ``SCRATCH_LR`` from random weights, around the usual fine-tuning rates
for a pretrained model."""

DEFAULT_SPACES = {
    "classify": "epochs=1..5,batch_size=16|32|64,warmup=0..0.2",
    "ner": "epochs=1..5,batch_size=16|32|64,warmup=0..0.2",
    "relation": "epochs=1..5,batch_size=16|32|64,warmup=0..0.2",
    "qa": "epochs=1..4,batch_size=16|32,warmup=0..0.2",
    "pretrain": "warmup=0..0.2,weight_decay=0..0.1",
}
"""Each task's default space besides the learning rate (``default_space``); other tasks take classify's."""


def default_space(task: str, scratch: bool) -> str:
    """``--space``'s default for the task named ``task`` (a BUILTIN name or a spec) and the model's kind."""
    low, high = LR_RANGES["scratch" if scratch else "pretrained"]
    return f"lr={low:g}..{high:g}:log," + DEFAULT_SPACES.get(task, DEFAULT_SPACES["classify"])


@dataclass
class Param:
    """One searched setting: a range (``low``, ``high``, ``log``) or ``choices``."""

    name: str
    section: str
    kind: str
    """int, float or choice"""
    low: Any = None
    high: Any = None
    log: bool = False
    choices: Optional[list] = None

    def suggest(self, trial) -> Any:
        """The trial's value (an Optuna trial's ``suggest_*``; a fixed value for an enqueued trial)."""
        if self.kind == "choice":
            return trial.suggest_categorical(self.name, self.choices)
        if self.kind == "int":
            return trial.suggest_int(self.name, self.low, self.high, log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)

    def describe(self) -> str:
        """The parameter as ``--space`` writes it."""
        if self.kind == "choice":
            return f"{self.name}={'|'.join(map(str, self.choices))}"
        return f"{self.name}={self.low:g}..{self.high:g}{':log' if self.log else ''}"

    def holding(self, value: Any) -> Param:
        """This parameter widened to hold ``value`` (trial 0's: the flags as given), with a warning line when it
        had to be."""
        if self.kind == "choice":
            if value in self.choices:
                return self
            wider = dataclasses.replace(self, choices=[*self.choices, value])
        elif self.low <= value <= self.high:
            return self
        else:
            wider = dataclasses.replace(self, low=min(self.low, value), high=max(self.high, value))
        print(
            f"warning: --space {self.describe()} widened to {wider.describe()}: trial 0 runs the flags as given "
            f"({flag_name(self.name)} {value})",
            file=sys.stderr,
        )
        return wider


@dataclass
class Space:
    """The parsed ``--space``: its parameters, and how a value of each is checked."""

    params: list[Param]
    check: Callable[[dict], RunConfig]
    """Settings {name: value} -> the RunConfig of the flags with them, or UserError."""

    def suggest(self, trial) -> dict:
        return {p.name: p.suggest(trial) for p in self.params}


def settings_of(task_fields) -> dict[str, tuple[str, dataclasses.Field]]:
    """Every setting a space may name -> (its recipe section, its field)."""
    known = {f.name: ("task", f) for f in task_fields}
    for section, cls in SECTIONS.items():
        if section != "parallel":
            known.update({f.name: (section, f) for f in dataclasses.fields(cls)})
    return known


def parse_space(spec: str, known: dict, check: Callable[[dict], RunConfig]) -> Space:
    """``spec`` (``--space``) against the settings ``known`` (``settings_of``); ``check`` builds a config from
    settings (the flags given, overridden), so each bound and choice is refused as its flag would refuse it."""
    params, seen = [], set()
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        name, sep, value = (s.strip() for s in item.partition("="))
        name = name.lstrip("-").replace("-", "_")
        where = f"--space {item!r}"
        if not sep or not value:
            raise UserError(f"{where}: write NAME=LOW..HIGH[:log] or NAME=A|B|C, e.g. lr=1e-5..1e-2:log")
        if name not in known:
            raise UserError(f"{where}: {flag_name(name)} is not a setting of this task.{suggest(name, known)}")
        if name in NOT_SEARCHED:
            raise UserError(f"{where}: {flag_name(name)} cannot be searched ({NOT_SEARCHED[name]})")
        if name in seen:
            raise UserError(f"{where}: {name} is in --space twice")
        seen.add(name)
        section, field = known[name]
        param = _parse_value(name, section, type_name(field), value, where)
        for bound in param.choices if param.kind == "choice" else (param.low, param.high):
            _check_value(check, name, bound, where)
        params.append(param)
    if not params:
        raise UserError("--space is empty: name at least one setting, e.g. --space lr=1e-5..1e-2:log")
    return Space(params, check)


def _parse_value(name: str, section: str, annotation: str, value: str, where: str) -> Param:
    base = annotation.replace("Optional[", "").rstrip("]")
    if "|" in value:
        choices = [_typed(v.strip(), base, where) for v in value.split("|")]
        if len(set(map(str, choices))) < len(choices):
            raise UserError(f"{where}: a choice is given twice")
        return Param(name, section, "choice", choices=choices)
    if ".." not in value:
        raise UserError(
            f"{where}: give a range LOW..HIGH or choices A|B; a single value is a flag: {flag_name(name)} {value}"
        )
    bounds, _, scale = value.partition(":")
    if scale not in ("", "log"):
        raise UserError(f"{where}: {scale!r} is no scale; the one scale is :log")
    if base not in ("int", "float"):
        raise UserError(f"{where}: {flag_name(name)} is a {base}, not a number: give choices A|B instead of a range")
    low, high = (_typed(b.strip(), base, where) for b in bounds.split("..", 1))
    if not low < high:
        raise UserError(f"{where}: the range's low end must be below its high end")
    if scale and low <= 0:
        raise UserError(f"{where}: a :log range must start above 0")
    return Param(name, section, base, low, high, log=bool(scale))


def _typed(text: str, base: str, where: str) -> Any:
    """A bound or choice as the setting's type (None for 'none' where the setting may be empty)."""
    try:
        if base == "int":
            number = float(text)
            if not number.is_integer():
                raise ValueError
            return int(number)
        if base == "float":
            number = float(text)
            if not math.isfinite(number):
                raise ValueError
            return number
    except ValueError:
        kind = "a whole number" if base == "int" else "a number"
        raise UserError(f"{where}: {text!r} is not {kind}") from None
    if base == "bool":
        if text.lower() not in ("true", "false"):
            raise UserError(f"{where}: {text!r} is not true or false")
        return text.lower() == "true"
    return text


def _check_value(check: Callable[[dict], RunConfig], name: str, value: Any, where: str) -> None:
    try:
        check({name: value})
    except UserError as e:
        raise UserError(f"{where}: {flag_name(name)} {value} is refused: {e}") from None

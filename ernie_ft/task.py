"""What a task is: the protocol the trainer drives, and how a task is named.

A task owns reading, labels, features, loss, metrics and the shape of predictions; the
trainer owns the model, optimizer, schedule and checkpoints. A custom task is one small file
(see ``tasks/multilabel_intent.py``) named on the command line as ``module:attr`` or
``path/to/file.py:attr``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any, Callable, Protocol

from ernie_ft.config import DataConfig
from ernie_ft.errors import UserError

# Built-in tasks: python -m ernie_ft.<name>. One explicit dict, no registry filled by imports.
BUILTIN = {
    "classify": "ernie_ft.classify:Classification",
    "ner": "ernie_ft.ner:NER",
    "qa": "ernie_ft.qa:QA",
    "pretrain": "ernie_ft.pretrain:Pretraining",
}


class Task(Protocol):
    name: str
    """How checkpoints refer to the task: a BUILTIN key or 'module:attr' / 'file.py:attr'."""
    head: str
    """The model head: 'sequence' (one output row per input), 'token' or 'span'."""
    metric: str
    """Default dev metric for picking the best checkpoint; greater is better, except for losses and perplexity."""
    # Optional: `model_class: str` ('module:Class') replaces the head's PaddleNLP class, and
    # `bind(model)` hands the task the built model (for losses or decoders with parameters, e.g. a CRF).
    # A task whose data streams from disk (pretraining) also has `reads_corpus = True` (its data flag
    # is --corpus FILE...), `held_out(train, data)` -> (train, dev or None) when no --dev is given,
    # `stream_features(examples, pipeline, data)` (features read lazily, or None for the usual path),
    # `collate(features, pipeline, seed, epoch)` (its own batches: masks drawn per epoch) and
    # `summarize(outputs, batch)` (per-input rows of evaluation outputs, see modeling.compute_logits);
    # its `flat_fields` name the batch entries not indexed by row, which a mesh keeps whole on every rank.
    # `unused_data_settings = {field: why}` names the DataConfig settings a task never reads (see below).

    def read(self, path: str, data: DataConfig, flag: str, labelled: bool = True) -> list:
        """Examples from a file; bad input raises UserError naming the file and line."""

    def fit_labels(self, train: list) -> list[str]:
        """The label set, from the training examples; its order is the model's output order."""

    def check_labels(self, examples: list, labels: list[str], data: DataConfig, flag: str) -> None:
        """Raise UserError for dev/test labels that train never had (unless allowed)."""

    def texts(self, examples: list) -> list[str]:
        """Every text the task needs encoded, in a fixed order that ``featurize`` relies on."""

    def featurize(self, examples: list, encodings: list, pipeline, labels: list[str], data: DataConfig) -> list[dict]:
        """Model inputs ('input_ids', 'token_type_ids'), targets and 'doc' (example index) per window.

        Every other key is a target the collator stacks (or pads, for a 'token' head's 'labels'),
        except keys starting with '_': bookkeeping (offsets, window positions) that stays on the
        feature for ``evaluate`` and ``predict``.
        """

    def loss(self, logits, batch: dict):
        """A scalar paddle Tensor from the model's logits and a collated batch."""

    def evaluate(self, logits, features: list[dict], examples: list, labels: list[str], data: DataConfig) -> dict:
        """Metrics (floats) from all windows' logits (numpy, one row per feature)."""

    def predict(self, logits, features: list[dict], examples: list, labels: list[str], data: DataConfig) -> list[dict]:
        """One JSON-serialisable record per example."""


def resolve_task(spec: str) -> type:
    """The task class (or factory) named ``spec``: a BUILTIN name, ``module:attr`` or ``file.py:attr``."""
    target = BUILTIN.get(spec, spec)
    module_name, _, attr = target.partition(":")
    if module_name.endswith(".py"):
        if not os.path.isfile(module_name):
            raise UserError(f"--task: {module_name} not found")
        module_spec = importlib.util.spec_from_file_location(os.path.basename(module_name)[:-3], module_name)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_spec.name] = module  # so inspect (option docs) and pickle find it
        module_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise UserError(
                f"--task {spec}: cannot import {module_name} ({e}); built-in tasks: {', '.join(BUILTIN)}"
            ) from None
    if not attr:
        raise UserError(f"--task {spec}: name the task class as {module_name}:ClassName")
    factory = getattr(module, attr, None)
    if factory is None:
        raise UserError(f"--task {spec}: {module_name} has no {attr}")
    return factory


PROTOCOL_FIELDS = ("name", "head", "metric", "model_class")


def unused_data_settings(task) -> dict[str, str]:
    """The data settings (``DataConfig`` fields) a task (class or instance; None: none) never reads, each with why.

    A task lists them in ``unused_data_settings``: the command line then has no flag for them and a
    recipe that sets one is an error, so a user's setting is never silently ignored.
    """
    return dict(getattr(task, "unused_data_settings", None) or {})


def task_options(cls) -> list[dataclasses.Field]:
    """A dataclass task's own settings: its init fields other than the protocol's attributes.

    Each becomes a command-line flag and a key of the recipe's ``task:`` section, documented
    by the docstring under the field, like the config dataclasses.
    """
    if not dataclasses.is_dataclass(cls):
        return []
    return [f for f in dataclasses.fields(cls) if f.init and f.name not in PROTOCOL_FIELDS]


def create_task(cls, options: dict | None = None, name: str | None = None) -> Task:
    """An instance of the task class with its options; ``name`` if the class does not set one."""
    task = cls(**(options or {}))
    if getattr(task, "name", None) in (None, ""):
        task.name = name
    return task


def load_task(spec: str, options: dict | None = None) -> Task:
    """An instance of the task named ``spec`` (see ``resolve_task``) with its options."""
    return create_task(resolve_task(spec), options, spec)


def label_order(values: Sequence[Any]) -> list[str]:
    """Sorted label names: numerically when every label is an integer, else by string."""
    unique = set(values)
    if all(v.lstrip("-").isdigit() for v in unique):
        return sorted(unique, key=int)
    return sorted(unique)


def check_known_labels(
    examples: Sequence,
    labels_of: Callable[[Any], Iterable[str]],
    known: Sequence[str],
    allow_new: bool,
    flag: str,
    noun: str = "label",
) -> None:
    """Raise UserError at the first example whose labels include one outside ``known``, unless ``allow_new``.

    ``labels_of(example)`` gives one example's labels (empty when it has none); examples carry
    ``source`` and ``line`` for the message. ``flag`` is the file's flag (--dev, --test, --input)
    and ``noun`` what a label is called ("label", "entity type", "intent"). With ``allow_new`` the
    task scores such labels as errors.
    """
    if allow_new:
        return
    allowed = set(known)
    for example in examples:
        unknown = sorted(set(labels_of(example)) - allowed)
        if unknown:
            shown = ", ".join(known[:20]) + (f", ... ({len(known)} in all)" if len(known) > 20 else "")
            raise UserError(
                f"{example.source}:{example.line}: {noun} {unknown[0]!r} ({flag}) does not occur in the "
                f"training data ({noun}s: {shown}); fix it or pass --allow-new-labels to score such "
                f"{noun}s as errors"
            )

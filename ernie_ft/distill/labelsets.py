"""Distillation from a multi-label or hierarchical teacher (a sigmoid per label or path node): the student is a
classifier of the same label sets, and its loss per label is a binary cross-entropy against the teacher's
sigmoid at a temperature, mixed with the labels' binary cross-entropy as the single-label loss mixes."""

from __future__ import annotations

import dataclasses

import numpy as np

from ernie_ft.errors import UserError

KIND = ("multi_label", "hierarchy_separator")
"""The teacher's settings that make its labels sets: the student takes them and may not set others."""
INHERITED = ("label_separator", "label_columns", "threshold", "thresholds", "top_k")
"""The teacher's label-set settings a student gets unless its recipe or flags set them."""
STUDENT = KIND + INHERITED + ("tune_thresholds",)
"""The settings a label-set student's checkpoint records (so predict decodes label sets)."""


def student_options(trained: dict, given: dict) -> dict:
    """The label-set settings of the student of a teacher trained with the task settings ``trained``: the
    teacher's (``KIND`` and ``INHERITED``) where ``given`` (the student's) leaves them unset; {} for a
    single-label teacher. ``given`` setting another kind of labels than the teacher's is a UserError."""
    kind = {k: trained[k] for k in KIND if trained.get(k)}
    for k in KIND:
        if given.get(k) and given[k] != kind.get(k):
            raise UserError(
                f"--{k.replace('_', '-')} does not apply to distill: the student's labels are the teacher's "
                f"({', '.join(f'{n}={v}' for n, v in kind.items()) or 'one label per text'}); leave it out"
            )
    if not kind:
        return {}
    return {**kind, **{k: trained[k] for k in INHERITED if trained.get(k) is not None and k not in given}}


def recorded(task) -> dict:
    """The label-set settings of the student ``task`` for its checkpoint ({} for one label per text)."""
    if not task.sets:
        return {}
    settings = vars(task)  # the dataclass's fields: every name of STUDENT is a setting of Classification
    return {k: settings[k] for k in STUDENT}


def filled(examples: list) -> list:
    """``examples`` with each unlabelled text (label None) given the empty label set, as Classification reads."""
    return [dataclasses.replace(e, label=()) if e.label is None else e for e in examples]


def mark_unlabelled(examples: list, features: list) -> None:
    """The windows of an unlabelled text (label None) get the target row -1 for every label: the loss then
    leaves out their hard term."""
    for f in features:
        if examples[f["doc"]].label is None:
            f["labels"] = np.full_like(f["labels"], -1.0)


def check_known(train: list, labels: list) -> None:
    """A labelled text with a node the teacher does not have is a UserError naming the file and line."""
    known = set(labels)
    for e in train:
        unknown = [n for n in e.label or () if n not in known]
        if unknown:
            raise UserError(
                f"--train: {e.source}:{e.line}: the label {unknown[0]!r} is not one of the teacher's "
                f"({', '.join(labels[:8])}{', ...' if len(labels) > 8 else ''}); --label-names maps codes to "
                "names as the teacher's run did"
            )


def soft_loss(task, logits, teacher_logits, labels):
    """Per window, the mean over labels of alpha * T^2 * BCE(sigmoid(teacher / T), student / T) + (1 - alpha) *
    BCE(labels, student), the hard term as Classification's (its class weights as ``pos_weight``), or the soft
    term alone for an unlabelled text (target row -1); the mean over the batch."""
    import paddle
    import paddle.nn.functional as F

    t = task.temperature
    logits = logits.astype("float32")
    target = F.sigmoid(teacher_logits.astype("float32") / t)
    soft = F.binary_cross_entropy_with_logits(logits / t, target, reduction="none").mean(axis=-1) * (t * t)
    labelled = (labels[:, 0] >= 0).astype("float32")
    weights = None if task._weights is None else paddle.to_tensor(task._weights)
    hard = F.binary_cross_entropy_with_logits(logits, labels.clip(min=0), pos_weight=weights, reduction="none")
    mixed = labelled * (task.alpha * soft + (1 - task.alpha) * hard.mean(axis=-1)) + (1 - labelled) * soft
    return mixed.mean()

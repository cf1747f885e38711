"""The settings every distillation checks, whatever its teacher's task."""

from __future__ import annotations

import os

from ernie_ft.distill.transfer import MODES
from ernie_ft.errors import UserError
from ernie_ft.recipes import suggest


def check(task) -> None:
    """The distillation's settings of ``task`` (a Distillation or an NerDistillation), checked."""
    if not task.teacher:
        raise UserError("--teacher is required: the output directory of a classification or NER run to distil")
    threshold_flags = ("threshold", "tune_thresholds", "top_k", "thresholds")
    given = [f for f in threshold_flags if vars(task).get(f)]  # the fields a student of either kind has
    if given and task.output_kind != "sigmoid":
        raise UserError(
            f"--{given[0].replace('_', '-')} is for a multi-label or hierarchical teacher's student: this teacher "
            "gives one label per text"
        )
    if not task.temperature > 0:
        raise UserError(f"--temperature must be greater than 0, not {task.temperature}")
    if not 0 <= task.alpha <= 1:
        raise UserError(f"--alpha is a weight between 0 and 1, not {task.alpha}")
    if task.transfer not in MODES:
        raise UserError(
            f"--transfer must be one of {', '.join(MODES)}, not {task.transfer!r}.{suggest(task.transfer, MODES)}"
        )
    if not task.transfer_weight >= 0:
        raise UserError(f"--transfer-weight must be 0 or more, not {task.transfer_weight}")


def unlabelled_files(spec: str | None) -> list[str]:
    """The files of ``--unlabelled`` (several joined by the path separator, as the recipe stores them)."""
    return [p for p in (spec or "").split(os.pathsep) if p]

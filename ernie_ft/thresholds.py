"""Decision thresholds: the one meaning of ``--threshold`` and ``--tune-thresholds`` in every task that has them.

A task whose predictions are the outputs scoring above a threshold (multi-label and label-path classification, nested
NER's spans, relation extraction's entities and pointers) declares it through the task protocol
(``TaskHooks.decides_by_threshold``). Its ``--threshold`` is a probability in (0, 1), default ``DEFAULT``, whatever
the model compares internally (a sigmoid's probability, or a logit: ``logit``). ``--tune-thresholds`` chooses it on
the dev part of the data, whatever made that part (``--dev`` or ``--dev-split``), from ``GRID``: the trainer asks the
task to tune before each dev evaluation (``TaskHooks.tune``), never before the test evaluation, and the best
checkpoint keeps what was chosen. ``predict``, ``evaluate`` and ``serve`` take ``--threshold`` to decide with another
probability (``TaskHooks.use_threshold``), and a served request may give its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Callable, ClassVar, Optional

from ernie_ft.errors import UserError

DEFAULT = 0.5
"""The probability at which an output counts when no threshold is given or tuned."""
GRID = tuple(round(0.05 * k, 2) for k in range(1, 20))
"""The probabilities ``--tune-thresholds`` tries: 0.05, 0.10, ..., 0.95."""
REQUEST_LOWEST = GRID[0]
"""The lowest threshold a served request may give: the server keeps the scores above it (``keep_scores_above``)."""
MAX_PER_TOKEN = 2
"""Span models (nested NER, relation extraction) decode at most this many candidates above the threshold per token
of a window and kind of output (the best-scoring): an untrained model scores half of all spans above 0.5, which
would otherwise take minutes and gigabytes to decode; a trained one comes nowhere near it."""


def check(value: Optional[float], flag: str = "--threshold") -> Optional[float]:
    """``value`` as a float when it is a probability strictly between 0 and 1 (None stays None); else a UserError
    naming ``flag``."""
    if value is None:
        return None
    try:
        p = float(value)
    except (TypeError, ValueError):
        p = math.nan
    if not 0 < p < 1:
        raise UserError(f"{flag} {value}: give a probability between 0 and 1 (exclusive), e.g. {flag} 0.3")
    return p


def probability(value: Optional[float]) -> float:
    """The threshold in force: ``value``, or ``DEFAULT`` when none was given."""
    return DEFAULT if value is None else float(value)


def logit(p: float) -> float:
    """The logit a probability threshold ``p`` means for a model that compares logits (sigmoid(logit) = p)."""
    return math.log(p / (1 - p))


def from_logit(x: float) -> float:
    """The probability threshold ``p`` that decides as the logit threshold ``x`` (a checkpoint of an earlier version):
    ``logit(p)`` is ``x`` or the float just above it, never below, so that no score equal to ``x`` counts."""
    p = 1 / (1 + math.exp(-x))
    while 0 < p < 1 and logit(p) < x:
        p = math.nextafter(p, 1)
    return p


def best(score_at: Callable[[float], float], grid: Sequence[float] = GRID, prefer: float = DEFAULT) -> tuple:
    """(threshold, score): the threshold of ``grid`` whose ``score_at(threshold)`` is highest; ties go to the one
    nearest ``prefer``, so that a flat score keeps the default."""
    ranked = sorted(grid, key=lambda t: abs(t - prefer))
    scores = {t: score_at(t) for t in ranked}
    chosen = max(ranked, key=lambda t: scores[t])  # max keeps the first of equal scores: the nearest to prefer
    return chosen, scores[chosen]


def tuned_line(dev_file: Optional[str], n_dev: int) -> str:
    """The one line a tuning run says at its start: what its thresholds are tuned on."""
    where = f"--dev {dev_file}" if dev_file else "the dev split held out of --train (--dev-split)"
    return f"thresholds tuned on {where} ({n_dev} texts) at each dev evaluation; the test file is never used"


def not_applicable(task_name: str, flag: str = "--threshold") -> UserError:
    """The error for ``flag`` given to a model whose task decides by no threshold."""
    return UserError(
        f"{flag} does not apply to this {task_name} model: its predictions are not outputs above a threshold "
        "(thresholds apply to classify --multi-label or --hierarchy-separator, ner --nested and relation)"
    )


class OneThreshold:
    """The protocol's threshold members for a task with one decision threshold, its dataclass fields ``threshold``
    (a probability, None: ``DEFAULT``) and ``tune_thresholds`` (nested NER, relation extraction): put before
    ``TaskHooks`` among the task's bases. The task's ``tune`` scores each threshold with ``tuned``."""

    decides_by_threshold: ClassVar[bool] = True

    @property
    def tunes_thresholds(self) -> bool:
        return self.tune_thresholds

    def threshold_of(self, output: str) -> float:
        return probability(self.threshold)

    def use_threshold(self, threshold: float) -> None:
        self.threshold = check(threshold)

    def tuned(self, score_at: Callable[[float], float]) -> dict:
        """Decide from now on with the threshold of ``GRID`` that ``score_at`` scores best (``best``); returns it as
        the dev metrics record it."""
        self.threshold, _ = best(score_at, prefer=probability(self.threshold))
        return {"threshold": self.threshold}

    def learned_options(self, dev: Optional[dict]) -> dict:
        if not self.tune_thresholds or not dev or "threshold" not in dev:
            return {}
        self.threshold = float(dev["threshold"])
        return {"threshold": self.threshold}

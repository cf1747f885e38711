"""Precision, recall and F1 from counts, as scikit-learn defines them (``precision_recall_fscore_support``: an
undefined ratio is ``zero_division``, F1 is 2tp / (true + predicted)), in numpy: ``evaluate`` runs in the runtime
install, which has no scikit-learn (tests/test_metrics_counts.py checks them against it)."""

from __future__ import annotations

import numpy as np


def divide(numerator, denominator, zero_division: float = 0.0) -> np.ndarray:
    """``numerator / denominator`` as float64, ``zero_division`` where the denominator is 0."""
    numerator, denominator = np.asarray(numerator, dtype=np.float64), np.asarray(denominator, dtype=np.float64)
    out = np.full(np.broadcast(numerator, denominator).shape, zero_division, dtype=np.float64)
    np.divide(numerator, denominator, out=out, where=denominator != 0)
    return out


def prf(tp, predicted, true, zero_division: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(precision, recall, F1) from the counts of true positives, predictions and gold occurrences."""
    tp = np.asarray(tp)
    return (
        divide(tp, predicted, zero_division),
        divide(tp, true, zero_division),
        divide(2.0 * tp, np.asarray(true) + np.asarray(predicted), zero_division),
    )


def confusion_counts(gold: list, pred: list, names: list) -> np.ndarray:
    """counts[i, j]: the examples with gold ``names[i]`` predicted as ``names[j]`` (int64)."""
    index = {name: i for i, name in enumerate(names)}
    counts = np.zeros((len(names), len(names)), dtype=np.int64)
    np.add.at(counts, (np.array([index[g] for g in gold], dtype=np.int64), [index[p] for p in pred]), 1)
    return counts


def indicator_counts(gold: np.ndarray, pred: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(true positives, predictions, gold occurrences) of texts x labels bool matrices, per label (``axis`` 0) or per
    text (1)."""
    return (gold & pred).sum(axis=axis), pred.sum(axis=axis), gold.sum(axis=axis)

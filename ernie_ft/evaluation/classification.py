"""Classification metrics, a printable report and a confusion matrix (``counts`` does the maths as scikit-learn)."""

from __future__ import annotations

import os

import numpy as np

from ernie_ft.evaluation.counts import confusion_counts, prf
from ernie_ft.evaluation.tables import format_table


def _label_names(gold: list[str], pred: list[str], labels: list[str]) -> list[str]:
    """The model's labels in their order, then any other gold or predicted labels by first appearance.

    Gold labels the model never saw (dev/test with --allow-new-labels) must stay visible as errors
    rather than silently drop out of the counts.
    """
    names = list(dict.fromkeys(labels))
    known = set(names)
    for label in list(gold) + list(pred):
        if label not in known:
            known.add(label)
            names.append(label)
    return names


def _check_lengths(gold: list[str], pred: list[str]) -> None:
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} labels but pred has {len(pred)}")
    if not gold:
        raise ValueError("no examples to score")


def classification_metrics(gold: list[str], pred: list[str], labels: list[str]) -> dict:
    """Score predicted labels against gold labels.

    In: parallel lists of gold and predicted labels, and the model's label list (order kept).
    Out: {"accuracy", "macro_precision", "macro_recall", "macro_f1": float,
          "per_class": {label: {"precision", "recall", "f1": float, "support": int}}}.
    per_class holds every model label plus any gold label outside `labels` (always an error).
    Macro averages run over the labels that occur in gold or pred, as scikit-learn does by
    default, so a model label absent from a small dev set does not count as a 0 F1.
    Undefined ratios are 0; all numbers are plain Python floats/ints.
    """
    _check_lengths(gold, pred)
    names = _label_names(gold, pred, labels)
    counts = confusion_counts(gold, pred, names)
    support = counts.sum(axis=1)
    precision, recall, f1 = prf(np.diag(counts), counts.sum(axis=0), support)
    present = (support + counts.sum(axis=0)) > 0  # the labels that occur in gold or pred
    macro_p, macro_r, macro_f1 = (values[present].mean() for values in (precision, recall, f1))
    per_class = {
        name: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
        for name, p, r, f, s in zip(names, precision, recall, f1, support)
    }
    return {
        "accuracy": float(np.trace(counts) / len(gold)),
        "macro_precision": float(macro_p),
        "macro_recall": float(macro_r),
        "macro_f1": float(macro_f1),
        "per_class": per_class,
    }


def format_classification_report(metrics: dict) -> str:
    """Render `classification_metrics` output as a fixed-width table (see `format_table`).

    In: the dict from classification_metrics. Out: lines (joined by newlines, no trailing newline)
    with one row per class, then macro avg and accuracy; every line has the same display width.
    """
    per_class = metrics["per_class"]
    total = sum(row["support"] for row in per_class.values())
    rows = [
        (name, f"{row['precision']:.4f}", f"{row['recall']:.4f}", f"{row['f1']:.4f}", str(row["support"]))
        for name, row in per_class.items()
    ]
    footer = [
        (
            "macro avg",
            f"{metrics['macro_precision']:.4f}",
            f"{metrics['macro_recall']:.4f}",
            f"{metrics['macro_f1']:.4f}",
            str(total),
        ),
        ("accuracy", "", "", f"{metrics['accuracy']:.4f}", str(total)),
    ]
    return format_table(("label", "precision", "recall", "f1", "support"), rows, footer)


def confusion(gold: list[str], pred: list[str], labels: list[str]) -> tuple[list[str], np.ndarray]:
    """Count (gold, predicted) pairs.

    In: parallel gold/pred label lists and the model's label list.
    Out: (names, matrix) where names are the model labels then any extra gold or predicted labels,
    and matrix[i, j] counts examples with gold names[i] predicted as names[j] (int64).
    """
    _check_lengths(gold, pred)
    names = _label_names(gold, pred, labels)
    return names, confusion_counts(gold, pred, names)


def classification_report(gold: list[str], pred: list[str], labels: list[str], out_dir: str) -> str:
    """``evaluate``'s printed report for one label per text: the per-class table, and the confusion matrix drawn as
    confusion_matrix.png in ``out_dir`` (its path on the last line)."""
    from ernie_ft.evaluation.plots import NOT_DRAWN, can_draw, plot_confusion_matrix

    names, matrix = confusion(gold, pred, labels)
    path = os.path.join(out_dir, "confusion_matrix.png")
    png = plot_confusion_matrix(names, matrix, path) if can_draw() else NOT_DRAWN
    return f"{format_classification_report(classification_metrics(gold, pred, labels))}\nconfusion matrix: {png}"

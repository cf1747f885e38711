"""Classification metrics, a printable report and a confusion matrix (scikit-learn does the maths)."""

from __future__ import annotations

import os

import numpy as np

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
    from sklearn.metrics import accuracy_score, precision_recall_fscore_support

    _check_lengths(gold, pred)
    names = _label_names(gold, pred, labels)
    seen = set(gold) | set(pred)
    present = [name for name in names if name in seen]
    macro_p, macro_r, macro_f1, _ = precision_recall_fscore_support(
        gold, pred, labels=present, average="macro", zero_division=0
    )
    precision, recall, f1, support = precision_recall_fscore_support(
        gold, pred, labels=names, average=None, zero_division=0
    )
    per_class = {
        name: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
        for name, p, r, f, s in zip(names, precision, recall, f1, support)
    }
    return {
        "accuracy": float(accuracy_score(gold, pred)),
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
    from sklearn.metrics import confusion_matrix

    _check_lengths(gold, pred)
    names = _label_names(gold, pred, labels)
    return names, confusion_matrix(gold, pred, labels=names)


def classification_report(gold: list[str], pred: list[str], labels: list[str], out_dir: str) -> str:
    """``evaluate``'s printed report for one label per text: the per-class table, and the confusion matrix drawn as
    confusion_matrix.png in ``out_dir`` (its path on the last line)."""
    from ernie_ft.evaluation.plots import plot_confusion_matrix

    names, matrix = confusion(gold, pred, labels)
    png = plot_confusion_matrix(names, matrix, os.path.join(out_dir, "confusion_matrix.png"))
    return f"{format_classification_report(classification_metrics(gold, pred, labels))}\nconfusion matrix: {png}"

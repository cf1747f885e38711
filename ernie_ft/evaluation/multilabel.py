"""Multi-label metrics (several labels per text, or label paths), their table and picture; ``counts`` does the maths
as scikit-learn."""

from __future__ import annotations

import numpy as np

from ernie_ft.evaluation.counts import indicator_counts, prf
from ernie_ft.evaluation.tables import format_table


def label_matrix(label_sets: list, names: list[str]) -> np.ndarray:
    """Texts x ``names`` (bool): whether each text's label set holds each name."""
    index = {name: i for i, name in enumerate(names)}
    matrix = np.zeros((len(label_sets), len(names)), dtype=bool)
    for row, labels in enumerate(label_sets):
        matrix[row, [index[label] for label in labels if label in index]] = True
    return matrix


def multilabel_metrics(gold: np.ndarray, pred: np.ndarray, names: list[str], levels: list[int] | None = None) -> dict:
    """Score predicted label sets against gold ones.

    In: texts x labels bool matrices ``gold`` and ``pred``, the labels' ``names`` and, for label paths, each
    label's level from 1 (``levels``). Out: {"micro_f1", "micro_precision", "micro_recall", "macro_f1",
    "samples_f1", "subset_accuracy", "hamming_loss", with two or more levels "level1_micro_f1",
    "level1_macro_f1", ..., "per_class": {label: {"precision", "recall", "f1", "support"}}}. Macro F1 averages
    the labels that occur in gold or pred; a text with no gold and no predicted label counts 1 in samples_f1.
    """
    if gold.shape != pred.shape:
        raise ValueError(f"gold has shape {gold.shape} but pred has {pred.shape}")
    if not len(gold):
        raise ValueError("no examples to score")
    gold, pred = gold.astype(bool), pred.astype(bool)
    per_label = indicator_counts(gold, pred)
    precision, recall, f1 = prf(*per_label)
    micro_p, micro_r, micro_f1 = prf(*(count.sum() for count in per_label))
    metrics = {
        "micro_f1": float(micro_f1),
        "micro_precision": float(micro_p),
        "micro_recall": float(micro_r),
        "macro_f1": _macro_f1(gold, pred),
        "samples_f1": float(prf(*indicator_counts(gold, pred, axis=1), zero_division=1.0)[2].mean()),
        "subset_accuracy": float((gold == pred).all(axis=1).mean()),
        "hamming_loss": float(np.count_nonzero(gold != pred)) / gold.size,
    }
    support = per_label[2]
    if levels is not None and max(levels, default=1) > 1:
        for level in sorted(set(levels)):
            cols = [i for i, depth in enumerate(levels) if depth == level]
            level_f1 = prf(*(count.sum() for count in indicator_counts(gold[:, cols], pred[:, cols])))[2]
            metrics[f"level{level}_micro_f1"] = float(level_f1)
            metrics[f"level{level}_macro_f1"] = _macro_f1(gold[:, cols], pred[:, cols])
    metrics["per_class"] = {
        name: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
        for name, p, r, f, s in zip(names, precision, recall, f1, support)
    }
    return metrics


def _macro_f1(gold: np.ndarray, pred: np.ndarray) -> float:
    """Macro F1 over the labels that occur in gold or pred (0 when none does)."""
    present = np.flatnonzero(gold.any(axis=0) | pred.any(axis=0))
    if not len(present):
        return 0.0
    return float(prf(*indicator_counts(gold[:, present], pred[:, present]))[2].mean())


SUMMARY = ("micro_f1", "macro_f1", "samples_f1", "subset_accuracy", "hamming_loss")


def format_multilabel_report(metrics: dict) -> str:
    """``multilabel_metrics`` as a fixed-width table: one row per label, then the overall and per-level figures."""
    rows = [
        (name, f"{row['precision']:.4f}", f"{row['recall']:.4f}", f"{row['f1']:.4f}", str(row["support"]))
        for name, row in metrics["per_class"].items()
    ]
    shown = [key for key in metrics if key in SUMMARY or key.startswith("level") or key == "accuracy"]
    footer = [
        ("micro avg", f"{metrics['micro_precision']:.4f}", f"{metrics['micro_recall']:.4f}", "", ""),
        *((key, "", "", f"{metrics[key]:.4f}", "") for key in shown),
    ]
    return format_table(("label", "precision", "recall", "f1", "support"), rows, footer)


def plot_label_scores(per_class: dict, path: str, title: str = "Per-label precision, recall and F1") -> str:
    """Draw each label's precision, recall and F1 as grouped horizontal bars (support beside the label); write
    the PNG ``path`` and return it."""
    from ernie_ft.evaluation.plots import _chinese_text, _new_figure, _save

    names = list(per_class)
    height = min(1.2 + 0.32 * len(names), 40.0)
    y = np.arange(len(names))
    with _chinese_text():
        figure = _new_figure(8.0, height)
        ax = figure.add_subplot()
        for k, (key, colour) in enumerate((("precision", "#4c72b0"), ("recall", "#dd8452"), ("f1", "#55a868"))):
            ax.barh(y + (k - 1) * 0.27, [per_class[n][key] for n in names], height=0.27, color=colour, label=key)
        size = max(6.0, min(10.0, 400.0 / max(len(names), 1)))
        ax.set_yticks(y, labels=[f"{n} ({per_class[n]['support']})" for n in names], fontsize=size)
        ax.set_ylim(len(names) - 0.5, -0.6)  # first label on top, no empty margins
        ax.set_xlim(0, 1)
        ax.set_xlabel("score (support in brackets)")
        ax.set_title(title)
        ax.grid(True, axis="x", alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
        return _save(figure, path)

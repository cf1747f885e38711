"""Classification with label sets: several labels per text (``--multi-label``) and label paths
(``--hierarchy-separator``), as reading, targets, metrics, predictions and the report of ``Classification``.

An example's ``label`` is then the tuple of its nodes (every prefix of each label path, parents first; the
labels themselves without a hierarchy), empty for a text with no label.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np

from ernie_ft.classify.labels import as_labels, check_split_columns, depths, path_nodes, read_label_columns
from ernie_ft.data.readers import read_examples
from ernie_ft.errors import UserError
from ernie_ft.evaluation.multilabel import label_matrix


def read_sets(task, path: str, data, flag: str, columns: dict, labelled: bool) -> list:
    """The examples of ``path`` with their label sets (see the module's docstring); a single-label hierarchy
    refuses a text with several labels."""
    from_columns = bool(task.label_columns) and labelled
    spec, allow_new = task.label_columns, data.allow_new_labels
    on, by_line = read_label_columns(path, flag, spec, columns) if from_columns else ((), {})
    names = data.label_name_map()
    task._columns[path] = list(path_nodes(tuple(names.get(c, c) for c in on), task.hierarchy_separator))
    if from_columns and flag != "--train" and data.train:  # dev and test: the training file's columns
        check_split_columns(spec, on, f"{flag}: {path}", data.train, columns, allow_new)
    require = labelled and not task.multi_label and not from_columns
    examples = read_examples(
        path,
        **columns,
        require_label=require,
        flag=flag,
        label_sets=task.multi_label,
        label_columns=tuple(on),
        predictions_as_labels=data.predictions_as_labels,
        hierarchy_separator=task.hierarchy_separator,
    )
    result = []
    for e in examples:
        labels = by_line.get(e.line, ()) if from_columns else as_labels(e.label, task.label_separator)
        labels = tuple(names.get(label, label) for label in labels)
        if not task.multi_label and len(labels) > 1:
            raise UserError(
                f"{flag}: {e.source}:{e.line}: {len(labels)} labels ({', '.join(labels[:4])}) but one label path "
                "per text is expected; pass --multi-label to learn several labels per text"
            )
        result.append(dataclasses.replace(e, label=path_nodes(labels, task.hierarchy_separator)))
    if labelled:
        _say_counts(result, path, flag, task)
    return result


def _say_counts(examples: list, path: str, flag: str, task) -> None:
    """The loading line: texts, with several labels, with none; no label at all is an error."""
    ends = [_ends(e.label, task.hierarchy_separator) for e in examples]
    several, none = sum(len(labels) > 1 for labels in ends), sum(not labels for labels in ends)
    if none == len(examples):
        raise UserError(
            f"{flag}: {path}: no text has a label; name the label column with --label-column, or the 0/1 columns "
            "with --label-columns"
        )
    print(f"{flag}: {len(examples)} texts, {several} with several labels, {none} with none", file=sys.stderr)


def _ends(nodes: tuple, separator: str | None) -> list:
    """The labels of a node tuple as given (each path's last node)."""
    if not separator:
        return list(nodes)
    return [n for n in nodes if not any(m.startswith(n + separator) for m in nodes)]


def targets(examples: list, labels: list[str]) -> np.ndarray:
    """Texts x labels, float32 0/1."""
    return label_matrix([e.label for e in examples], labels).astype(np.float32)


def scored(task, gold_sets: list, pred: np.ndarray, labels: list[str]):
    """(gold, predicted, names, levels): bool matrices over the model's labels and any gold label it never saw
    (--allow-new-labels: always missed), as ``multilabel_metrics`` takes them; ``gold_sets``: each text's labels,
    ``pred``: the decided rows (texts x ``labels``)."""
    known = set(labels)
    extra = list(dict.fromkeys(n for gold in gold_sets for n in gold if n not in known))
    names = list(labels) + extra
    gold = label_matrix(gold_sets, names)
    pred = np.concatenate([pred, np.zeros((len(pred), len(extra)), dtype=bool)], axis=1)
    return gold, pred, names, depths(names, task.hierarchy_separator)


def decided(task, logits, features, examples, labels, data) -> np.ndarray:
    """Each text's predicted labels (texts x ``labels``, bool), by the task's thresholds (tuned ones where the trainer
    had them tuned); one text's row depends on that text alone, so chunks of a file decide as the whole file."""
    return task.decide(task.probabilities(logits, features, examples, data), labels)


def set_metrics(task, gold_sets: list, pred: np.ndarray, labels: list[str]) -> dict:
    """Metrics of label sets from each text's gold labels and its decided row."""
    from ernie_ft.evaluation.multilabel import multilabel_metrics

    gold, pred, names, levels = scored(task, gold_sets, pred, labels)
    metrics = multilabel_metrics(gold, pred, names, levels if task.hierarchy_separator else None)
    if not task.multi_label:
        metrics = {"accuracy": metrics["subset_accuracy"], **metrics}
    return metrics


def set_report(metrics: dict, out_dir: str) -> str:
    """The per-label table with the overall (and per-level) figures, and a per-label P/R/F1 PNG in ``out_dir``."""
    from ernie_ft.evaluation.multilabel import format_multilabel_report, plot_label_scores
    from ernie_ft.evaluation.plots import NOT_DRAWN, can_draw

    path = os.path.join(out_dir, "label_scores.png")
    png = plot_label_scores(metrics["per_class"], path) if can_draw() else NOT_DRAWN
    return f"{format_multilabel_report(metrics)}\nper-label scores: {png}"


def evaluate_sets(task, logits, features, examples, labels, data) -> dict:
    """Metrics of label sets, decided by the task's thresholds."""
    pred = decided(task, logits, features, examples, labels, data)
    return set_metrics(task, [e.label for e in examples], pred, labels)


def predict_sets(task, logits, features, examples, labels, data) -> list[dict]:
    """{"text"[, "text_pair"], "labels": [...], "probs": {...}} per text; a single-label path also gives
    "label", its last node."""
    probs = task.probabilities(logits, features, examples, data)
    chosen = task.decide(probs, labels)
    records = []
    for example, p, row in zip(examples, probs, chosen):
        record = {"text": example.text}
        if example.text_pair is not None:
            record["text_pair"] = example.text_pair
        predicted = [labels[i] for i in np.flatnonzero(row)]
        if not task.multi_label:
            record["label"] = predicted[-1] if predicted else None
        record["labels"] = predicted
        record["probs"] = {label: round(float(v), 6) for label, v in zip(labels, p)}
        records.append(record)
    return records


def report_sets(task, logits, features, examples, labels, data, out_dir: str) -> str:
    """The per-label table with the overall (and per-level) figures, and a per-label P/R/F1 PNG in ``out_dir``."""
    return set_report(evaluate_sets(task, logits, features, examples, labels, data), out_dir)

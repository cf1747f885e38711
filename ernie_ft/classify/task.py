"""Text classification (single texts or pairs): ``python -m ernie_ft.classify``."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ernie_ft.config import DataConfig
from ernie_ft.data.readers import read_examples
from ernie_ft.data.windows import pool_windows, windowed_inputs
from ernie_ft.errors import UserError
from ernie_ft.task import TaskHooks, check_known_labels, label_order


def read_labelled(path: str, data: DataConfig, flag: str, labelled: bool = True) -> list:
    """Examples (text, text_pair, label, line, source) from TSV, CSV, JSONL or .txt."""
    return read_examples(
        path,
        text_column=data.text_column,
        pair_column=data.text_pair_column,
        label_column=data.label_column,
        require_label=labelled,
        flag=flag,
    )


def text_windows(examples: list, encodings: list, pipeline, data: DataConfig) -> list[dict]:
    """Windowed model inputs per example: 'input_ids', 'token_type_ids' and 'doc' (example index).

    ``encodings`` holds the encodings of every example's text, then of every text pair, as
    ``pair_texts`` orders them.
    """
    n = len(examples)
    pairs = iter(encodings[n:])
    features, cut = [], 0
    for doc, (example, first) in enumerate(zip(examples, encodings[:n])):
        second = next(pairs).ids if example.text_pair is not None else None
        windows, was_cut = windowed_inputs(
            first.ids, second, data.max_len, data.overlap(), pipeline.cls_id, pipeline.sep_id
        )
        cut += was_cut
        features += [{"input_ids": ids, "token_type_ids": types, "doc": doc} for ids, types in windows]
    if cut:
        print(
            f"note: {cut} second texts were longer than half of --max-len {data.max_len} and were cut", file=sys.stderr
        )
    return features


def pair_texts(examples: list) -> list[str]:
    return [e.text for e in examples] + [e.text_pair for e in examples if e.text_pair is not None]


@dataclass
class Classification(TaskHooks):
    """One label per text or text pair; long texts are windowed and their logits pooled."""

    name: str = "classify"
    head: str = "sequence"
    metric: str = "accuracy"
    input_fields: ClassVar[tuple] = (("text",), ("text_pair",))

    def read(self, path, data, flag, labelled=True):
        return read_labelled(path, data, flag, labelled)

    def fit_labels(self, train):
        labels = label_order([e.label for e in train])
        if len(labels) < 2:
            raise UserError(
                f"{train[0].source}: every training example has the label {labels[0]!r}; "
                "a classifier needs at least two labels"
            )
        return labels

    def check_labels(self, examples, labels, data, flag):
        check_known_labels(
            examples, lambda e: () if e.label is None else (e.label,), labels, data.allow_new_labels, flag
        )

    def texts(self, examples):
        return pair_texts(examples)

    def featurize(self, examples, encodings, pipeline, labels, data):
        index = {label: i for i, label in enumerate(labels)}
        features = text_windows(examples, encodings, pipeline, data)
        for f in features:
            f["labels"] = index.get(examples[f["doc"]].label, -1)
        return features

    def loss(self, logits, batch):
        import paddle.nn.functional as F

        return F.cross_entropy(logits, batch["labels"])

    def probabilities(self, logits, features, examples, data) -> np.ndarray:
        pooled = pool_windows(logits, np.array([f["doc"] for f in features]), len(examples), data.window_pooling)
        pooled = pooled - pooled.max(axis=1, keepdims=True)
        exp = np.exp(pooled)
        return exp / exp.sum(axis=1, keepdims=True)

    def evaluate(self, logits, features, examples, labels, data):
        from ernie_ft.evaluation.classification import classification_metrics

        predicted = self.probabilities(logits, features, examples, data).argmax(axis=1)
        return classification_metrics([e.label for e in examples], [labels[i] for i in predicted], labels)

    def predict(self, logits, features, examples, labels, data):
        probs = self.probabilities(logits, features, examples, data)
        records = []
        for example, p in zip(examples, probs):
            record = {"text": example.text}
            if example.text_pair is not None:
                record["text_pair"] = example.text_pair
            record["label"] = labels[int(p.argmax())]
            record["probs"] = {label: round(float(v), 6) for label, v in zip(labels, p)}
            records.append(record)
        return records

    def report(self, logits, features, examples, labels, data, out_dir: str) -> str:
        """Per-class table as text, and a confusion-matrix PNG in ``out_dir``."""
        from ernie_ft.evaluation.classification import classification_metrics, confusion, format_classification_report
        from ernie_ft.evaluation.plots import plot_confusion_matrix

        predicted = [labels[i] for i in self.probabilities(logits, features, examples, data).argmax(axis=1)]
        gold = [e.label for e in examples]
        names, matrix = confusion(gold, predicted, labels)
        png = plot_confusion_matrix(names, matrix, os.path.join(out_dir, "confusion_matrix.png"))
        table = format_classification_report(classification_metrics(gold, predicted, labels))
        return f"{table}\nconfusion matrix: {png}"

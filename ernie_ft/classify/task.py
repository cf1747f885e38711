"""Text classification (single texts or pairs): ``python -m ernie_ft.classify``."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ernie_ft.config import DataConfig
from ernie_ft.data.readers import read_examples, record_examples
from ernie_ft.data.windows import pair_texts, pool_windows, text_windows
from ernie_ft.errors import UserError
from ernie_ft.task import TaskHooks, check_known_labels, label_order, split_dev


def read_labelled(path: str, data: DataConfig, flag: str, labelled: bool = True) -> list:
    """Examples (text, text_pair, label, line, source) from TSV, CSV, JSONL or .txt, coded labels named
    as --label-names says."""
    examples = read_examples(path, **data_columns(data), require_label=labelled, flag=flag)
    return name_labels(examples, data.label_name_map(), flag)


def data_columns(data: DataConfig) -> dict:
    """The columns ``data`` names and how its tables are read (``header``, ``sheet``), as ``read_examples`` and
    ``record_examples`` take them."""
    columns = {"text_column": data.text_column, "pair_column": data.text_pair_column, "label_column": data.label_column}
    return {**columns, "header": data.header, "sheet": data.sheet}


def name_labels(examples: list, names: dict[str, str], flag: str) -> list:
    """``examples`` with each coded label replaced by its name; a label that is already a name stays. A label
    that is neither is an error naming the file and line (a mapping that misses a code is a typo to fix)."""
    if not names:
        return examples
    known = set(names.values())
    for e in examples:
        if e.label is not None and e.label not in known and e.label not in names:
            raise UserError(
                f"{flag}: {e.source}:{e.line}: the label {e.label!r} has no name in --label-names "
                f"({', '.join(f'{k}={v}' for k, v in names.items())}); add {e.label}=NAME"
            )
    return [dataclasses.replace(e, label=names.get(e.label, e.label)) for e in examples]


@dataclass
class Classification(TaskHooks):
    """One label per text or text pair; long texts are windowed and their logits pooled."""

    name: str = "classify"
    head: str = "sequence"
    metric: str = "accuracy"
    input_fields: ClassVar[tuple] = (("text",), ("text_pair",))
    _codes: dict = dataclasses.field(default_factory=dict, init=False, repr=False)
    """Name -> code of --label-names (set by ``read``): named labels keep their codes' order."""

    def read(self, path, data, flag, labelled=True):
        self._codes = {name: code for code, name in data.label_name_map().items()}
        return read_labelled(path, data, flag, labelled)

    def read_records(self, records, data, flag):
        examples = record_examples(records, **data_columns(data), require_label=False, flag=flag)
        return name_labels(examples, data.label_name_map(), flag)

    def held_out(self, train, data):
        """``--dev-split`` of train as dev, never taking a label's last training example."""
        return split_dev(train, data.dev_split, lambda e: e.label if isinstance(e.label, tuple) else (e.label,))

    def fit_labels(self, train):
        labels = label_order([e.label for e in train])
        if self._codes and all(label in self._codes for label in labels):
            order = label_order(list(self._codes.values()))
            labels = sorted(labels, key=lambda name: order.index(self._codes[name]))
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

"""A custom task in one file: multi-label intent detection (an utterance may carry several intents).

    python -m ernie_ft --task tasks/multilabel_intent.py:MultiLabelIntent \
        --train data/intent_train.jsonl --dev data/intent_dev.jsonl \
        --model scratch:tiny --epochs 20 --lr 2e-3 --output runs/intent

Records are JSONL: {"text": "明天早上七点叫我起床", "labels": ["设置闹钟"]}. Everything except
reading, the loss and the metrics comes from the library: windows, batching, the trainer,
checkpoints, predict and evaluate.
"""

import os
import sys
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from ernie_ft import check_known_labels, thresholds
from ernie_ft.data.sources import Location, check_records, read_records
from ernie_ft.data.windows import pool_windows, text_windows
from ernie_ft.errors import UserError


@dataclass(frozen=True)
class Utterance:
    text: str
    labels: tuple
    line: int
    source: str
    text_pair: Optional[str] = None


def utterance(at: Location, line: int, source: str, row: dict, labelled: bool) -> Utterance:
    """One record's utterance; ``at`` places it in messages (a file's line, or ``inputs[2].text``)."""
    text, labels = row.get("text"), row.get("labels", [] if not labelled else None)
    if not isinstance(text, str) or not text.strip():
        raise UserError(f'{at.field("text")}: missing or empty "text"')
    if not isinstance(labels, list):
        raise UserError(f'{at.field("labels")}: "labels" must be a list of intent names')
    return Utterance(text, tuple(str(x) for x in labels), line, source)


@dataclass
class MultiLabelIntent:
    name: str = f"{os.path.relpath(__file__)}:MultiLabelIntent"
    head: str = "sequence"
    metric: str = "micro_f1"
    threshold: float = 0.5
    """Probability above which an intent is predicted."""
    output_kind: ClassVar[str] = "sigmoid"
    """A sigmoid per intent: an export for transformers says multi_label_classification."""
    decides_by_threshold: ClassVar[bool] = True
    reads_records_apart: ClassVar[bool] = True
    """Each record is read on its own: predict streams a large input."""
    """Its predictions are the intents above ``threshold``: predict, evaluate and serve take --threshold."""
    unused_data_settings: ClassVar[dict] = dict.fromkeys(
        ("text_column", "text_pair_column", "label_column", "label_names", "predictions_as_labels"),
        'records are JSONL with "text" and "labels" keys',
    )
    """Settings this task never reads: no flags for them, and a recipe that sets one is an error."""

    def use_threshold(self, threshold):
        """Decide with ``threshold`` (``predict --threshold``, a served request's own) instead of the option."""
        self.threshold = thresholds.check(threshold)

    def read(self, path, data, flag, labelled=True):
        _, rows = read_records(path, flag)
        return [utterance(Location(f"{path}:{line}"), line, path, row, labelled) for line, row in rows]

    def read_records(self, records, data, flag):
        """The utterances ``read`` gives for a JSON Lines file of ``records`` (a served request's inputs)."""
        rows = check_records(records, flag)
        return [utterance(Location.item(flag, line - 1), line, flag, row, False) for line, row in rows]

    def fit_labels(self, train):
        return sorted({label for e in train for label in e.labels})

    def check_labels(self, examples, labels, data, flag):
        check_known_labels(examples, lambda e: e.labels, labels, data.allow_new_labels, flag, "intent")

    def texts(self, examples):
        return [e.text for e in examples]

    def featurize(self, examples, encodings, pipeline, labels, data):
        features = text_windows(examples, encodings, pipeline, data)
        for f in features:
            f["labels"] = [float(label in examples[f["doc"]].labels) for label in labels]
        return features

    def loss(self, logits, batch):
        import paddle.nn.functional as F

        return F.binary_cross_entropy_with_logits(logits, batch["labels"])

    def probabilities(self, logits, features, examples, data):
        docs = np.array([f["doc"] for f in features])
        return 1 / (1 + np.exp(-pool_windows(logits, docs, len(examples), data.window_pooling)))

    def evaluate(self, logits, features, examples, labels, data):
        from sklearn.metrics import f1_score

        predicted = self.probabilities(logits, features, examples, data) >= self.threshold
        gold = np.array([[label in e.labels for label in labels] for e in examples])
        return {
            "micro_f1": float(f1_score(gold, predicted, average="micro", zero_division=0)),
            "macro_f1": float(f1_score(gold, predicted, average="macro", zero_division=0)),
            "exact_match": float((gold == predicted).all(axis=1).mean()),
        }

    def predict(self, logits, features, examples, labels, data):
        probs = self.probabilities(logits, features, examples, data)
        return [
            {
                "text": e.text,
                "labels": [label for label, q in zip(labels, p) if q >= self.threshold],
                "probs": {label: round(float(q), 6) for label, q in zip(labels, p)},
            }
            for e, p in zip(examples, probs)
        ]


if __name__ == "__main__":
    from ernie_ft.cli import run_task

    sys.exit(run_task(MultiLabelIntent.name, sys.argv[1:], "python tasks/multilabel_intent.py", MultiLabelIntent))

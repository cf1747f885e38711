"""A complete task in one file: sentiment of short reviews, one label per text, long texts in windows.

    python docs/examples/skeleton.py [OUTPUT_DIR]      # trains one epoch through setup and fit
    python -m ernie_ft --task docs/examples/skeleton.py:Sentiment --train data/sentiment_train.tsv \
        --dev data/sentiment_dev.tsv --output runs/skeleton          # the same task from the command line

Copy it and change ``read``, ``featurize``, ``loss``, ``evaluate`` and ``predict``; everything else
(the model, windows, batching, the trainer, checkpoints, ``predict``, ``evaluate``, ``serve``) comes
from ernie_ft.
"""

import os
import sys
import tempfile
from dataclasses import dataclass

import numpy as np

from ernie_ft import TaskHooks, check_known_labels, label_order
from ernie_ft.data.readers import read_examples
from ernie_ft.data.windows import pool_windows, text_windows


@dataclass
class Sentiment(TaskHooks):  # TaskHooks: every optional hook with its default
    name: str = f"{os.path.abspath(__file__)}:Sentiment"
    head: str = "sequence"  # one row of logits per model input
    metric: str = "accuracy"  # the dev metric that picks best/
    pooling: str = "mean"
    """How the windows of a long review are combined: mean or max."""  # a task option: --pooling

    def read(self, path, data, flag, labelled=True):
        return read_examples(
            path, text_column=data.text_column, label_column=data.label_column, require_label=labelled, flag=flag
        )

    def fit_labels(self, train):
        return label_order([e.label for e in train])

    def check_labels(self, examples, labels, data, flag):
        check_known_labels(
            examples, lambda e: [] if e.label is None else [e.label], labels, data.allow_new_labels, flag
        )

    def texts(self, examples):
        return [e.text for e in examples]

    def featurize(self, examples, encodings, pipeline, labels, data):
        features = text_windows(examples, encodings, pipeline, data)  # input_ids, token_type_ids, doc
        for f in features:
            label = examples[f["doc"]].label
            f["labels"] = labels.index(label) if label in labels else -100  # -100: no loss
        return features

    def loss(self, logits, batch):
        import paddle.nn.functional as F

        return F.cross_entropy(logits, batch["labels"])

    def probabilities(self, logits, features, examples):
        docs = np.array([f["doc"] for f in features])
        pooled = pool_windows(logits, docs, len(examples), self.pooling)
        exp = np.exp(pooled - pooled.max(axis=1, keepdims=True))
        return exp / exp.sum(axis=1, keepdims=True)

    def evaluate(self, logits, features, examples, labels, data):
        predicted = self.probabilities(logits, features, examples).argmax(axis=1)
        return {"accuracy": float(np.mean([labels[p] == e.label for p, e in zip(predicted, examples)]))}

    def predict(self, logits, features, examples, labels, data):
        return [
            {
                "text": e.text,
                "label": labels[int(p.argmax())],
                "probs": {k: round(float(v), 4) for k, v in zip(labels, p)},
            }
            for e, p in zip(examples, self.probabilities(logits, features, examples))
        ]


def main(output: str) -> None:
    from ernie_ft import build_config, fit, setup  # here: importing the task must not import Paddle

    config = build_config(
        {
            "data": {"train": "data/sentiment_train.tsv", "dev": "data/sentiment_dev.tsv", "max_len": 64},
            "model": {"model": "scratch:tiny"},
            "train": {"epochs": 1, "batch_size": 4, "lr": 2e-3, "log_steps": 16},
        },
        {"output": output},
    )
    run = setup(Sentiment(), config)  # reads and checks the data, builds the model and optimizer
    metrics = fit(run)  # trains; the best checkpoint is in OUTPUT/best
    print(f"dev accuracy after 1 epoch: {metrics['dev']['accuracy']:.2f}")
    print(f"checkpoint: {os.path.join(output, 'best')}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(os.path.join(tmp, "run"))

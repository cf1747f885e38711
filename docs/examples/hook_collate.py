"""``collate``: the task makes its own batches (pretraining draws its masks here, per seed and epoch).

    python docs/examples/hook_collate.py [WORK_DIR]

``collate(features, pipeline, seed, epoch)`` returns the batch as numpy arrays (``epoch`` is None in
evaluation and prediction), or None for the usual dynamic padding. This one pads every batch to a
multiple of 8 tokens; ``compute_logits`` (what ``evaluate``, ``predict`` and ``serve`` call) uses it.
"""

import os
import sys
import tempfile
from dataclasses import dataclass

import numpy as np
import paddle

from ernie_ft.config import DataConfig
from ernie_ft.models.modeling import compute_logits, task_batching
from ernie_ft.task import resolve_task
from ernie_ft.text.pipeline import TextPipeline
from ernie_ft.text.scratch import build_vocab, write_vocab

Sentiment = resolve_task("docs/examples/skeleton.py:Sentiment")


@dataclass
class PaddedToEight(Sentiment):
    def collate(self, features, pipeline, seed, epoch):
        width = -(-max(len(f["input_ids"]) for f in features) // 8) * 8
        ids = np.full((len(features), width), pipeline.pad_id, dtype="int64")
        for row, f in enumerate(features):
            ids[row, : len(f["input_ids"])] = f["input_ids"]
        labels = np.array([f["labels"] for f in features], dtype="int64")
        return {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "labels": labels}


class BagOfTokens(paddle.nn.Layer):
    """A stand-in for ERNIE: the mean of the token embeddings, then a linear layer. Records the input widths."""

    def __init__(self, vocab_size: int, num_labels: int):
        super().__init__()
        self.embed, self.out, self.widths = paddle.nn.Embedding(vocab_size, 16), paddle.nn.Linear(16, num_labels), []

    def forward(self, input_ids, token_type_ids=None, position_ids=None, **extra):
        self.widths.append(input_ids.shape[1])
        mask = (input_ids != 0).astype("float32").unsqueeze(-1)
        return self.out((self.embed(input_ids) * mask).sum(1) / mask.sum(1))


def main(work: str) -> None:
    os.makedirs(work, exist_ok=True)
    task, data = PaddedToEight(), DataConfig(max_len=64)
    examples = task.read("data/sentiment_dev.tsv", data, "--dev")
    labels, texts = task.fit_labels(examples), task.texts(examples)
    write_vocab(build_vocab(texts), os.path.join(work, "vocab.txt"))
    pipeline = TextPipeline(os.path.join(work, "vocab.txt"), segment=False)  # no word boundaries needed here
    features = task.featurize(examples, [pipeline.encode(t) for t in texts], pipeline, labels, data)
    model = BagOfTokens(pipeline.vocab_size, len(labels))
    logits = compute_logits(model, features, pipeline.pad_id, 16, **task_batching(task, pipeline, seed=0))
    widths = sorted(set(model.widths))
    print(f"logits {logits.shape}; the model saw widths {widths}: multiples of 8: {all(w % 8 == 0 for w in widths)}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)

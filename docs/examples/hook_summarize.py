"""``summarize``: one row per input of a batch's outputs, instead of the raw logits (pretraining keeps the
top tokens of each masked position rather than [positions x vocabulary] logits).

    python docs/examples/hook_summarize.py [WORK_DIR]

``summarize(outputs, batch)`` gets a batch's model outputs (paddle Tensors) and the batch; its rows, in
the batch's order, are what ``evaluate`` and ``predict`` receive as ``logits``. None keeps the outputs.
"""

import os
import sys
import tempfile
from dataclasses import dataclass

import paddle

from ernie_ft.config import DataConfig
from ernie_ft.models.modeling import compute_logits, task_batching
from ernie_ft.task import resolve_task
from ernie_ft.text.pipeline import TextPipeline
from ernie_ft.text.scratch import build_vocab, write_vocab

# The skeleton task with hook_collate.py's batches (numpy padding: the default imports PaddleNLP, slow to start)
PaddedToEight = resolve_task("docs/examples/hook_collate.py:PaddedToEight")


@dataclass
class TopLabel(PaddedToEight):
    def summarize(self, outputs, batch):
        probs = paddle.nn.functional.softmax(outputs, axis=-1)
        return [(int(p.argmax()), round(float(p.max()), 3)) for p in probs.numpy()]  # (label index, probability)


class BagOfTokens(paddle.nn.Layer):
    """A stand-in for ERNIE: the mean of the token embeddings, then a linear layer."""

    def __init__(self, vocab_size: int, num_labels: int):
        super().__init__()
        self.embed, self.out = paddle.nn.Embedding(vocab_size, 16), paddle.nn.Linear(16, num_labels)

    def forward(self, input_ids, token_type_ids=None, position_ids=None, **extra):
        mask = (input_ids != 0).astype("float32").unsqueeze(-1)
        return self.out((self.embed(input_ids) * mask).sum(1) / mask.sum(1))


def main(work: str) -> None:
    os.makedirs(work, exist_ok=True)
    task, data = TopLabel(), DataConfig(max_len=64)
    examples = task.read("data/sentiment_dev.tsv", data, "--dev")
    labels, texts = task.fit_labels(examples), task.texts(examples)
    write_vocab(build_vocab(texts), os.path.join(work, "vocab.txt"))
    pipeline = TextPipeline(os.path.join(work, "vocab.txt"), segment=False)
    features = task.featurize(examples, [pipeline.encode(t) for t in texts], pipeline, labels, data)
    model = BagOfTokens(pipeline.vocab_size, len(labels))
    rows = compute_logits(model, features, pipeline.pad_id, 16, **task_batching(task, pipeline, seed=0))
    print(f"{len(rows)} rows for {len(features)} inputs; the first: {rows[:2]}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)

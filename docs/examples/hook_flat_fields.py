"""``flat_fields``: batch entries that are not indexed by row, which a tensor-parallel mesh keeps whole.

    python docs/examples/hook_flat_fields.py [WORK_DIR]

Pretraining's batches hold ``masked_positions``: indices into the flattened [rows x tokens] batch, as many
as the batch has masks, not one per row. On a mesh (``--tensor-parallel``) every other entry is split by
row over the data-parallel axis; the entries named in ``flat_fields`` are kept whole on every rank (its
effect is tested on 2 x 2 CPU processes in ``tests/test_pretrain.py``). Here ``collate`` makes such an
entry, the model gathers its outputs at those positions, and ``summarize`` gives each input its rows back.
"""

import os
import sys
import tempfile
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import paddle

from ernie_ft.config import DataConfig
from ernie_ft.models.modeling import compute_logits, task_batching
from ernie_ft.task import resolve_task
from ernie_ft.text.pipeline import TextPipeline
from ernie_ft.text.scratch import build_vocab, write_vocab

# The skeleton task with hook_collate.py's batches (numpy padding: the default imports PaddleNLP, slow to start)
PaddedToEight = resolve_task("docs/examples/hook_collate.py:PaddedToEight")


@dataclass
class EveryFifthToken(PaddedToEight):
    flat_fields: ClassVar[tuple] = ("masked_positions",)

    def collate(self, features, pipeline, seed, epoch):
        batch = super().collate(features, pipeline, seed, epoch)  # padded rows, then a flat entry
        width = batch["input_ids"].shape[1]
        real = [np.arange(1, len(f["input_ids"]) - 1, 5) for f in features]  # every fifth token of each row
        batch["masked_positions"] = np.concatenate([row * width + r for row, r in enumerate(real)]).astype("int64")
        return batch

    def summarize(self, outputs, batch):
        rows = (batch["masked_positions"] // batch["input_ids"].shape[1]).numpy()
        values = outputs.numpy()
        return [values[rows == row] for row in range(batch["input_ids"].shape[0])]


class TokenScores(paddle.nn.Layer):
    """A stand-in for ERNIE's MLM head: one score per token, taken only at ``masked_positions``."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.embed = paddle.nn.Embedding(vocab_size, 1)

    def forward(self, input_ids, token_type_ids=None, position_ids=None, masked_positions=None):
        return paddle.gather(self.embed(input_ids).reshape([-1]), masked_positions)


def main(work: str) -> None:
    os.makedirs(work, exist_ok=True)
    task, data = EveryFifthToken(), DataConfig(max_len=64)
    examples = task.read("data/sentiment_dev.tsv", data, "--dev")
    labels, texts = task.fit_labels(examples), task.texts(examples)
    write_vocab(build_vocab(texts), os.path.join(work, "vocab.txt"))
    pipeline = TextPipeline(os.path.join(work, "vocab.txt"), segment=False)
    features = task.featurize(examples, [pipeline.encode(t) for t in texts], pipeline, labels, data)
    batch = task.collate(features[:4], pipeline, 0, None)
    print(f"a batch of {len(batch['input_ids'])} rows holds {len(batch['masked_positions'])} masked_positions")
    print(f"kept whole on every rank of a mesh: {task.flat_fields}")
    rows = compute_logits(
        TokenScores(pipeline.vocab_size), features, pipeline.pad_id, 16, **task_batching(task, pipeline)
    )
    print(f"{len(rows)} inputs; scores at their positions: {[len(r) for r in rows[:4]]} ...")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)

"""``stream_features``: features read lazily from disk instead of ``texts`` + ``featurize`` (a corpus larger than RAM).

    python docs/examples/hook_stream_features.py [CACHE_DIR]

The trainer asks for ``len(features)``, ``features[i]`` and, when present, ``features.lengths`` (for
length-grouped batches): anything with those works, e.g. a memory-mapped file (pretraining's blocks).
Returning None takes the usual path.
"""

import os
import sys
import tempfile
from dataclasses import dataclass

import numpy as np

from ernie_ft.config import DataConfig, ModelConfig
from ernie_ft.data.dataset import featurize
from ernie_ft.models.modeling import load_pipeline
from ernie_ft.task import resolve_task

Sentiment = resolve_task("docs/examples/skeleton.py:Sentiment")


class Blocks:
    """Fixed-size blocks of token ids in a memory-mapped .npy file: one feature per row, built on access."""

    def __init__(self, path: str):
        self.ids = np.load(path, mmap_mode="r")
        self.lengths = np.full(len(self.ids), self.ids.shape[1])

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        ids = self.ids[i].tolist()
        return {"input_ids": ids, "token_type_ids": [0] * len(ids), "doc": 0}


@dataclass
class Streamed(Sentiment):
    block_file: str = ""
    """A .npy file of token-id blocks, [blocks, block length]."""

    def stream_features(self, examples, pipeline, data):
        return Blocks(self.block_file), "memory-mapped"  # (features, where they came from: logged)


def main(cache: str) -> None:
    os.makedirs(cache, exist_ok=True)
    data = DataConfig(max_len=32, cache_dir=cache)
    examples = Streamed().read("data/sentiment_train.tsv", data, "--train")
    pipeline = load_pipeline(ModelConfig(model="scratch:tiny"), data, lambda: [e.text for e in examples])
    ids = [pipeline.cls_id, *pipeline.encode("".join(e.text for e in examples)).ids]
    blocks = np.array(ids[: len(ids) // 32 * 32]).reshape(-1, 32)
    np.save(os.path.join(cache, "blocks.npy"), blocks)
    task = Streamed(block_file=os.path.join(cache, "blocks.npy"))
    split = featurize(task, "train", examples, pipeline, [], data)  # the trainer's call
    print(f"{type(split.features).__name__}: {len(split.features)} blocks of {split.lengths[0]} tokens")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)

"""From files to features: read and check every split, tokenise (cached), audit, window."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from ernie_ft.config import DataConfig
from ernie_ft.errors import UserError

SPLITS = ("train", "dev", "test")


def default_cache_dir() -> str:
    return os.environ.get("ERNIE_FT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "ernie_ft")


@dataclass
class Split:
    name: str
    examples: list
    features: list

    @property
    def lengths(self) -> np.ndarray:
        known = getattr(self.features, "lengths", None)  # features read lazily from disk know theirs
        return known if known is not None else np.array([len(f["input_ids"]) for f in self.features])


def read_splits(task, data: DataConfig) -> tuple[dict, list[str]]:
    """Every given split read and checked before anything is written; returns (examples, labels)."""
    if not data.train:
        raise UserError(
            "--corpus is required (text files)"
            if task.reads_corpus
            else "--train is required (a TSV, CSV or JSONL file)"
        )
    examples = {}
    for name in SPLITS:
        path = getattr(data, name)
        if path:
            examples[name] = task.read(path, data, f"--{name}")
    if "dev" not in examples:
        examples["train"], dev = task.held_out(examples["train"], data)
        if dev is not None:
            examples["dev"] = dev
    labels = task.fit_labels(examples["train"])
    for name in ("dev", "test"):
        if name in examples:
            task.check_labels(examples[name], labels, data, f"--{name}")
    return examples, labels


def featurize(
    task,
    name: str,
    examples: list,
    pipeline,
    labels: list[str],
    data: DataConfig,
    audit_report: bool = False,
    cache: bool = True,
) -> Split:
    """Tokenise a split's texts (through the cache, unless ``cache`` is False) and turn them into model features."""
    from ernie_ft.data.batching import compact_inputs
    from ernie_ft.text.audit import audit

    start = time.perf_counter()
    streamed = task.stream_features(examples, pipeline, data)
    if streamed is not None:  # read lazily from disk (a pretraining corpus): no texts held in memory
        (features, source), audit_report = streamed, False
    else:
        texts = task.texts(examples)
        cache_dir = (data.cache_dir or default_cache_dir()) if cache else None
        encodings = pipeline.encode_many(  # no word ids: jieba runs only where a vocabulary extension needs it
            texts, cache_dir=cache_dir, num_proc=data.num_proc, word_ids=False
        )
        source = "cache" if getattr(pipeline, "last_cache_hit", False) else "tokenised"
        features = compact_inputs(task.featurize(examples, encodings, pipeline, labels, data))
    took = time.perf_counter() - start
    print(f"{name}: {len(examples)} examples -> {len(features)} inputs ({source} in {took:.1f}s)", file=sys.stderr)
    if audit_report:
        print(f"audit ({name}): {audit(texts, encodings, pipeline.unk_id).summary()}", file=sys.stderr)
    if not features:
        raise UserError(f"--{name}: no input could be built from {getattr(data, name, name)}")
    return Split(name, examples, features)

"""Batching: a length-grouped sampler and dynamic padding (numpy)."""

from __future__ import annotations

import numpy as np

MODEL_INPUTS = ("input_ids", "token_type_ids")
METADATA = ("doc",)


class LengthGroupedSampler:
    """Batches of indices for one epoch, reproducible from (seed, epoch).

    Training order: shuffle, sort by length inside mega-batches of ``mega_batches`` global
    batches (so a batch holds inputs of similar length and padding is small), then shuffle the
    batches. With ``num_replicas`` data-parallel replicas, the global batch of
    ``batch_size * num_replicas`` inputs is the one a single process would take with that
    batch size, and rank r takes its r-th slice; the tail that cannot fill a global batch
    for every rank is dropped so that all ranks step together; ``rank=None`` gives the whole
    global batches (every replica's slice in rank order). Without ``shuffle``
    (evaluation) the order is by length, longest first.
    """

    def __init__(
        self,
        lengths,
        batch_size: int,
        *,
        shuffle: bool = True,
        group: bool = True,
        seed: int = 0,
        mega_batches: int = 50,
        num_replicas: int = 1,
        rank: int | None = 0,
    ):
        self.lengths = np.asarray(lengths)
        self.batch_size = batch_size
        self.shuffle, self.group, self.seed = shuffle, group, seed
        self.global_batch = batch_size * num_replicas
        self.mega = mega_batches * self.global_batch
        self.num_replicas, self.rank = num_replicas, rank

    def batches(self, epoch: int = 0) -> list[list[int]]:
        n = len(self.lengths)
        if not self.shuffle:
            order = np.argsort(-self.lengths, kind="stable")
            return [order[i : i + self.batch_size].tolist() for i in range(0, n, self.batch_size)]
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(n)
        if self.group:
            chunks = [order[s : s + self.mega] for s in range(0, n, self.mega)]
            order = np.concatenate([c[np.argsort(-self.lengths[c], kind="stable")] for c in chunks])
        step = self.global_batch
        batches = [order[i : i + step] for i in range(0, n, step)]
        if self.group:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        if self.num_replicas == 1:
            return [b.tolist() for b in batches]
        full = [b for b in batches if len(b) == step]
        if not full:
            raise ValueError(
                f"{n} inputs cannot fill one batch of {self.batch_size} on each of {self.num_replicas} replicas"
            )
        if self.rank is None:  # whole global batches, for a mesh that splits them itself
            return [b.tolist() for b in full]
        return [b[self.rank * self.batch_size : (self.rank + 1) * self.batch_size].tolist() for b in full]


def compact_inputs(features: list[dict]) -> list[dict]:
    """Each feature's model inputs as int32 arrays, in place: a list of Python ints costs about 36 bytes a token
    beside the array's 4, and a training split's features are held for the whole run."""
    for f in features:
        for key in MODEL_INPUTS:
            if isinstance(f.get(key), list):
                f[key] = np.asarray(f[key], dtype=np.int32)
    return features


def padding_fraction(batches: list[list[int]], lengths) -> float:
    """Share of padded positions when each batch is padded to its longest input."""
    lengths = np.asarray(lengths)
    real = sum(int(lengths[b].sum()) for b in batches)
    padded = sum(int(lengths[b].max()) * len(b) for b in batches)
    return 1.0 - real / padded if padded else 0.0


def pad(sequences, value, dtype: str = "int64") -> np.ndarray:
    """``sequences`` as one array, each padded on the right with ``value`` to the longest (PaddleNLP's ``Pad``, which
    needs PaddleNLP's import: running an export does without it)."""
    out = np.full((len(sequences), max((len(s) for s in sequences), default=0)), value, dtype=dtype)
    for row, sequence in zip(out, sequences):
        row[: len(sequence)] = sequence
    return out


def collate(features: list[dict], pad_id: int, token_labels: bool = False, label_pad: int = -100) -> dict:
    """Features -> numpy batch: inputs padded to the longest, targets stacked (or padded when per token)."""
    batch = {
        "input_ids": pad([f["input_ids"] for f in features], pad_id),
        "token_type_ids": pad([f["token_type_ids"] for f in features], 0),
    }
    for key in features[0]:
        if key in MODEL_INPUTS or key in METADATA or key.startswith("_"):
            continue  # "doc" and "_"-prefixed keys are bookkeeping for post-processing, not tensors
        values = [f[key] for f in features]
        if token_labels and key == "labels":
            batch[key] = pad(values, label_pad)
        else:
            stacked = np.stack(values)
            batch[key] = stacked.astype(np.float32) if stacked.dtype == np.float64 else stacked
    return batch

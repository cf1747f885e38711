"""What a pretrained model's held-out masked accuracy owes to word order, against count-table baselines.

    python experiments/probe_mlm.py --model runs/pre/best [--masking word|char] [--no-model]

Reads the pretraining run's resolved config beside ``--model`` (``ernie_ft.yaml``: corpus, ``--max-len``,
seed, held-out share or --dev file, masking), packs the same train and dev blocks (from the block cache when the run
built it) and draws the same dev masks as the run's evaluation. Three predictors, fitted by counting
the training blocks' tokens, score every masked dev position:

- unigram: always the most frequent token;
- left neighbour: the token most often after the visible token to the left;
- neighbours: the token most often between the visible left and right tokens, else the left
  neighbour's, else the token most often before the visible right one, else the unigram's.

A neighbour is visible when it is text (not a special token, not [MASK]) in the masked input, so with
whole-word masking the inside of a masked word has no visible neighbour. No learning beyond counting:
floors that tell how much of a model's masked accuracy needs more than local statistics.

Then the model itself (loaded with PaddleNLP's ``ErnieForMaskedLM``) on the same masks twice: as
evaluated ("model") and with the unmasked text tokens of every block shuffled in place ("model,
shuffled": the masked positions, specials and block length unchanged, only the order of the context
lost), with the gap between the two and its paired standard error over the masked tokens. Equal scores
mean the model reads its context as a bag of tokens. With them, the mean norm of
the position embeddings the blocks use (1 to max_len - 1), of those they never reach (still at their
initial scale) and of the word embeddings: how loud position is in the model's input. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ernie_ft.config import DataConfig  # noqa: E402
from ernie_ft.training.checkpoint import load_model, resolve_model_dir  # noqa: E402


def commonest_after(first: np.ndarray, second: np.ndarray, vocab: int) -> dict[int, int]:
    """For each value of ``first``, the value of ``second`` seen with it most often (ties: the smaller id)."""
    codes, counts = np.unique(first.astype(np.int64) * vocab + second, return_counts=True)
    keys, values = codes // vocab, codes % vocab
    order = np.lexsort((values, -counts, keys))  # by key, then most frequent first
    keys, values = keys[order], values[order]
    first_of_key = np.r_[True, keys[1:] != keys[:-1]]
    return dict(zip(keys[first_of_key].tolist(), values[first_of_key].tolist()))


def fit(train_blocks, vocab: int):
    """Unigram, left-neighbour, right-neighbour and (left, right) tables from the text tokens of the blocks."""
    unigrams, lefts, rights, pairs, middles = np.zeros(vocab, np.int64), [], [], [], []
    for b in train_blocks:
        ids, text = np.asarray(b["input_ids"]), np.asarray(b["words"]) >= 0
        np.add.at(unigrams, ids[text], 1)
        both = text[:-1] & text[1:]
        lefts.append(ids[:-1][both])
        rights.append(ids[1:][both])
        three = text[:-2] & text[1:-1] & text[2:]
        pairs.append(ids[:-2][three] * vocab + ids[2:][three])
        middles.append(ids[1:-1][three])
    lefts, rights = np.concatenate(lefts), np.concatenate(rights)
    return (
        int(unigrams.argmax()),
        commonest_after(lefts, rights, vocab),
        commonest_after(rights, lefts, vocab),
        commonest_after(np.concatenate(pairs), np.concatenate(middles), vocab),
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a pretraining run's best/ (its ernie_ft.yaml says the data)")
    p.add_argument("--masking", choices=("word", "char"), help="default: the run's")
    p.add_argument("--no-model", action="store_true", help="the count tables only")
    args = p.parse_args(argv)

    args.model = resolve_model_dir(args.model)  # a run's directory or its best/
    loaded = load_model(args.model, weights=False)  # task, text pipeline and resolved run config of the checkpoint
    task, pipeline, run = loaded.task, loaded.pipeline, loaded.run
    if args.masking:
        task.masking = args.masking
    data = DataConfig(**run["data"])
    train = task.read(data.train, data, "--train")
    train, dev = (train, task.read(data.dev, data, "--dev")) if data.dev else task.held_out(train, data)
    if dev is None:
        sys.exit(f"error: {args.model}: the run held out no dev text, so there are no dev masks to score")
    train_blocks = task.stream_features(train, pipeline, data)[0]
    dev_blocks = list(task.stream_features(dev, pipeline, data)[0])
    vocab = pipeline.vocab_size
    unigram, after, before, between = fit(train_blocks, vocab)

    batch = task.collate(dev_blocks, pipeline, run["train"]["seed"], None)  # the evaluation's fixed masks
    ids, labels = batch["input_ids"], batch["masked_labels"]
    rows, length = ids.shape
    special = {pipeline.pad_id, pipeline.cls_id, pipeline.sep_id, pipeline.mask_id, pipeline.unk_id}
    hits = {"unigram": 0, "left neighbour": 0, "neighbours": 0}
    for position, label in zip(batch["masked_positions"].tolist(), labels.tolist()):
        row, col = divmod(position, length)
        left = int(ids[row, col - 1]) if col > 0 else None
        right = int(ids[row, col + 1]) if col + 1 < length else None
        left = None if left in special else left
        right = None if right in special else right
        by_left = after.get(left, unigram) if left is not None else unigram
        if left is not None and right is not None and left * vocab + right in between:
            guess = between[left * vocab + right]
        elif left is not None and left in after:
            guess = after[left]
        elif right is not None and right in before:
            guess = before[right]
        else:
            guess = unigram
        hits["unigram"] += label == unigram
        hits["left neighbour"] += label == by_left
        hits["neighbours"] += label == guess
    masked = len(labels)
    scores = {name: count / masked for name, count in hits.items()}
    if not args.no_model:
        words = np.full(ids.shape, -1)
        for row, b in enumerate(dev_blocks):
            words[row, : len(b["words"])] = b["words"]
        chosen = np.zeros(ids.size, bool)
        chosen[batch["masked_positions"]] = True
        context = (words >= 0) & ~chosen.reshape(ids.shape)
        shuffled = ids.copy()
        rng = np.random.default_rng(0)
        for row in range(rows):
            keep = np.flatnonzero(context[row])
            shuffled[row, keep] = ids[row, rng.permutation(keep)]
        scores.update(embedding_norms(args.model, data.max_len))
        ordered = model_hits(args.model, ids, batch["token_type_ids"], batch["masked_positions"], labels)
        unordered = model_hits(args.model, shuffled, batch["token_type_ids"], batch["masked_positions"], labels)
        gap = ordered.astype(float) - unordered
        scores.update(
            {
                "model": ordered.mean(),
                "model, shuffled": unordered.mean(),
                "order gap": gap.mean(),
                "order gap, standard error": gap.std(ddof=1) / np.sqrt(len(gap)),
            }
        )  # paired, per token
    print(
        json.dumps(
            {
                "masking": task.masking,
                "masked_tokens": masked,
                "dev_blocks": rows,
                **{name: round(value, 4) for name, value in scores.items()},
            },
            ensure_ascii=False,
        )
    )
    return 0


def embedding_norms(model_dir: str, max_len: int) -> dict:
    """Mean L2 norms of the position embeddings used (1..max_len-1) and unused (max_len..), and of the word
    embeddings."""
    from safetensors.numpy import load_file

    weights = load_file(os.path.join(model_dir, "model.safetensors"))
    positions = next(v for k, v in weights.items() if k.endswith("position_embeddings.weight"))
    words = next(v for k, v in weights.items() if k.endswith("word_embeddings.weight"))
    norms = np.linalg.norm(positions, axis=1)
    return {
        "position norm, used": float(norms[1:max_len].mean()),
        "position norm, unused": float(norms[max_len:].mean()) if len(norms) > max_len else float("nan"),
        "word norm": float(np.linalg.norm(words, axis=1).mean()),
    }


def model_hits(
    model_dir: str,
    ids: np.ndarray,
    types: np.ndarray,
    positions: np.ndarray,
    labels: np.ndarray,
    rows_per_pass: int = 64,
) -> np.ndarray:
    """Whether ``ErnieForMaskedLM``'s top-1 token is the label, at each masked position (flat indices into ``ids``)."""
    import paddle
    from paddlenlp.transformers import ErnieForMaskedLM

    paddle.set_device("cpu")
    model = ErnieForMaskedLM.from_pretrained(model_dir)
    model.eval()
    length, hits = ids.shape[1], np.zeros(len(labels), bool)
    for start in range(0, len(ids), rows_per_pass):
        stop = min(start + rows_per_pass, len(ids))
        inside = (positions >= start * length) & (positions < stop * length)
        with paddle.no_grad():
            logits = model(
                paddle.to_tensor(ids[start:stop]),
                token_type_ids=paddle.to_tensor(types[start:stop]),
                masked_positions=paddle.to_tensor(positions[inside] - start * length),
            )
        hits[inside] = logits.numpy().argmax(-1) == labels[inside]
    return hits


if __name__ == "__main__":
    sys.exit(main())

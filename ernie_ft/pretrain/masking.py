"""Masked-language-model inputs: whole-word (or per-token) masks drawn from (seed, epoch, block).

Because a block's masks depend only on those three numbers, a data-parallel run draws exactly
the masks one process would, and a resumed run those of an uninterrupted one.
"""

from __future__ import annotations

import numpy as np

MASK, RANDOM = 0.8, 0.9
"""Of the chosen tokens: below 0.8 [MASK], below 0.9 a random token, the rest unchanged (BERT's 80/10/10)."""


def block_rng(seed: int, epoch: int | None, block: int) -> np.random.Generator:
    """The generator for one block's masks; ``epoch`` None gives the fixed masks of evaluation."""
    return np.random.default_rng([seed % 2**32, 0 if epoch is None else epoch + 1, block])


def units(words: np.ndarray, whole_word: bool) -> tuple[np.ndarray, np.ndarray]:
    """(maskable token positions, the unit of each): a unit is a jieba word (consecutive tokens with the
    same word number) or, without ``whole_word``, a single token. Special tokens (word -1) are never maskable."""
    words = np.asarray(words)
    positions = np.flatnonzero(words >= 0)
    if not whole_word or len(positions) == 0:
        return positions, np.arange(len(positions))
    w = words[positions]
    starts = np.ones(len(positions), dtype=bool)
    starts[1:] = (w[1:] != w[:-1]) | (positions[1:] != positions[:-1] + 1)
    return positions, np.cumsum(starts) - 1


def choose(unit_of: np.ndarray, rate: float, rng: np.random.Generator) -> np.ndarray:
    """A boolean per maskable token: whole units, in random order, until ``rate`` of the tokens are
    chosen (a unit that would overshoot is skipped); at least one unit."""
    sizes = np.bincount(unit_of).tolist()
    target = max(1, int(round(rate * len(unit_of))))
    order = rng.permutation(len(sizes)).tolist()
    chosen, total = np.zeros(len(sizes), dtype=bool), 0
    for u in order:
        if total + sizes[u] <= target:
            chosen[u] = True
            total += sizes[u]
            if total == target:
                break
    if total == 0:
        chosen[order[0]] = True
    return chosen[unit_of]


def mask_block(
    ids: np.ndarray,
    words: np.ndarray,
    rng: np.random.Generator,
    rate: float,
    mask_id: int,
    random_ids: np.ndarray,
    whole_word: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(input ids with the chosen tokens replaced 80/10/10, the chosen positions, their original ids)."""
    ids = np.asarray(ids)
    positions, unit_of = units(words, whole_word)
    if len(positions) == 0:
        return ids.copy(), positions, ids[positions]
    chosen = positions[choose(unit_of, rate, rng)]
    draw = rng.random(len(chosen))
    out = ids.copy()
    out[chosen[draw < MASK]] = mask_id
    swapped = chosen[(draw >= MASK) & (draw < RANDOM)]
    out[swapped] = rng.choice(random_ids, len(swapped))
    return out, chosen, ids[chosen]


def mlm_batch(
    features: list[dict],
    pad_id: int,
    sep_id: int,
    mask_id: int,
    random_ids: np.ndarray,
    rate: float,
    whole_word: bool,
    seed: int,
    epoch: int | None,
    electra: bool = False,
) -> dict:
    """A padded batch with masks: 'input_ids', 'token_type_ids' (1 after a block's first inner [SEP]),
    'masked_positions' (flat indices into [batch x length]), 'masked_labels' and 'masked_weights'
    (1 / (masked tokens of the row x rows), so every block weighs the same in the loss). With
    ``electra`` also 'original_ids' (the unmasked input), 'replace_uniform' (one draw in [0, 1) per
    masked position, for the generator's sample) and 'token_weights' (1 / (tokens of the row x rows)).

    A feature with '_masked' (fill-mask inputs: the positions of the user's [MASK]s) keeps its ids
    and gets label -100 there; others are masked with ``block_rng(seed, epoch, feature['doc'])``.
    """
    rows, length = len(features), max(len(f["input_ids"]) for f in features)
    electra = electra and not any("_masked" in f for f in features)  # fill-mask runs the generator alone
    input_ids = np.full((rows, length), pad_id, dtype=np.int64)
    types = np.zeros((rows, length), dtype=np.int64)
    positions, labels, weights, uniforms = [], [], [], []
    for row, f in enumerate(features):
        ids = np.asarray(f["input_ids"])
        if "_masked" in f:
            masked, chosen = ids, np.asarray(f["_masked"], dtype=np.int64)
            targets = np.full(len(chosen), -100)
        else:
            rng = block_rng(seed, epoch, f["doc"])
            masked, chosen, targets = mask_block(ids, f["words"], rng, rate, mask_id, random_ids, whole_word)
            if electra:
                uniforms.append(rng.random(len(chosen)))
        input_ids[row, : len(ids)] = masked
        seps = np.flatnonzero(ids[:-1] == sep_id)
        if len(seps):
            types[row, seps[0] + 1 : len(ids)] = 1
        positions.append(row * length + chosen)
        labels.append(targets)
        weights.append(np.full(len(chosen), 1.0 / (max(1, len(chosen)) * rows)))
    batch = {
        "input_ids": input_ids,
        "token_type_ids": types,
        "masked_positions": np.concatenate(positions).astype(np.int64),
        "masked_labels": np.concatenate(labels).astype(np.int64),
        "masked_weights": np.concatenate(weights).astype(np.float32),
    }
    if electra:
        original = np.full((rows, length), pad_id, dtype=np.int64)
        token_weights = np.zeros((rows, length), dtype=np.float32)
        for row, f in enumerate(features):
            original[row, : len(f["input_ids"])] = f["input_ids"]
            token_weights[row, : len(f["input_ids"])] = 1.0 / (len(f["input_ids"]) * rows)
        batch.update(
            original_ids=original,
            replace_uniform=np.concatenate(uniforms).astype(np.float32),
            token_weights=token_weights,
        )
    return batch

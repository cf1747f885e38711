"""NER's decode in numpy (running an export needs no Paddle): the best valid BIO tag path of a tagger's emissions,
with a CRF's transitions or none, and the tags' log-probabilities."""

from __future__ import annotations

import numpy as np

FORBIDDEN = -1e6  # added to forbidden moves: no sum of emissions outweighs one of them


def bio_constraints(labels: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(allowed[i, j]: may tag j follow tag i, allowed_first[j]: may a sequence start with tag j).

    I-X must follow B-X or I-X; everything else is allowed.
    """
    inside = [label[2:] if label.startswith("I-") else None for label in labels]
    allowed = np.ones((len(labels), len(labels)), dtype=bool)
    for j, kind in enumerate(inside):
        if kind is not None:
            allowed[:, j] = [label in (f"B-{kind}", f"I-{kind}") for label in labels]
    return allowed, np.array([kind is None for kind in inside])


def log_softmax(scores: np.ndarray) -> np.ndarray:
    """The log-softmax of each row of ``scores`` [steps, tags], computed as scipy.special.log_softmax does."""
    shifted = scores - scores.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def viterbi(emissions: list[np.ndarray], transitions: np.ndarray, labels: list[str]) -> list[np.ndarray]:
    """The best valid BIO tag path (ids) for each [length, tags] emission array, given the ``transitions[from, to]``
    scores (Paddle's ``viterbi_decode`` finds the same paths: float32 sums in its order, the first of equal
    scores)."""
    allowed, first = bio_constraints(labels)
    trans = np.where(allowed, transitions, FORBIDDEN).astype("float32")
    paths = [np.zeros(0, dtype="int64")] * len(emissions)
    todo = [i for i, e in enumerate(emissions) if len(e)]
    for chunk in (todo[k : k + 512] for k in range(0, len(todo), 512)):
        lengths = np.array([len(emissions[i]) for i in chunk])
        batch = np.zeros((len(chunk), lengths.max(), len(labels)), dtype="float32")
        for row, i in enumerate(chunk):
            batch[row, : lengths[row]] = emissions[i]
        batch[:, 0, ~first] += np.float32(FORBIDDEN)
        for row, path in enumerate(best_paths(batch, trans, lengths)):
            paths[chunk[row]] = path
    return paths


def best_paths(scores: np.ndarray, trans: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """The highest-scoring tag path of each row of ``scores`` [rows, steps, tags] (float32), cut to its length."""
    alpha = scores[:, 0]
    back = np.zeros(scores.shape, dtype="int64")  # back[r, t, j]: the best tag before tag j at step t
    for t in range(1, scores.shape[1]):
        moves = alpha[:, :, None] + trans[None]
        back[:, t] = moves.argmax(axis=1)
        step = np.take_along_axis(moves, back[:, t][:, None, :], axis=1)[:, 0] + scores[:, t]
        alpha = np.where((t < lengths)[:, None], step, alpha)
    paths = []
    for row, length in enumerate(lengths):
        path = [int(alpha[row].argmax())]
        for t in range(length - 1, 0, -1):
            path.append(int(back[row, t, path[-1]]))
        paths.append(np.array(path[::-1], dtype="int64"))
    return paths

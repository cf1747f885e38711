"""From per-label probabilities to predicted label sets: thresholds, ``--top-k``, label paths, tuned thresholds.

With a hierarchy the rule that a node is predicted only with its parent holds here, at decoding: a child
whose probability passes its threshold is dropped when its parent is not predicted, and ``--top-k`` keeps
whole paths.
"""

from __future__ import annotations

import numpy as np

from ernie_ft import thresholds
from ernie_ft.classify.labels import parent

GRID = np.array(thresholds.GRID)
"""The thresholds tried per label when they are tuned on dev (``ernie_ft.thresholds.GRID``)."""


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -60, 60)))


def parents(labels: list[str], separator: str | None) -> np.ndarray:
    """Each label's parent as a column index, -1 for a top-level node (every label without a hierarchy)."""
    index = {label: i for i, label in enumerate(labels)}
    if not separator:
        return np.full(len(labels), -1)
    return np.array([index.get(parent(label, separator), -1) for label in labels])


def decode(probs: np.ndarray, thresholds: np.ndarray, up: np.ndarray, top_k: int = 0) -> np.ndarray:
    """Predicted labels (texts x labels, bool): each label whose probability reaches its threshold and whose
    parent (``up``, from ``parents``) is predicted; with ``top_k`` at most that many paths per text, the most
    probable ones by their last node, each with all its ancestors."""
    chosen = probs >= thresholds
    level = _levels(up)
    for depth in range(1, int(level.max(initial=0)) + 1):  # parents are settled before their children
        cols = np.flatnonzero((level == depth) & (up >= 0))
        chosen[:, cols] &= chosen[:, up[cols]]
    if top_k > 0:
        chosen = np.array([_keep_paths(row, p, up, top_k) for row, p in zip(chosen, probs)]).reshape(chosen.shape)
    return chosen


def _levels(up: np.ndarray) -> np.ndarray:
    """Each column's depth from 0 (top level) along ``up``."""
    level = np.zeros(len(up), dtype=int)
    for i in range(len(up)):
        j = up[i]
        while j >= 0:
            level[i] += 1
            j = up[j]
    return level


def _keep_paths(row: np.ndarray, probs: np.ndarray, up: np.ndarray, top_k: int) -> np.ndarray:
    """``row`` limited to its ``top_k`` most probable path ends (chosen nodes with no chosen child), with ancestors."""
    has_child = np.zeros(len(row), dtype=bool)
    has_child[up[row & (up >= 0)]] = True
    ends = np.flatnonzero(row & ~has_child)
    if len(ends) <= top_k:
        return row
    kept = np.zeros(len(row), dtype=bool)
    for i in ends[np.argsort(-probs[ends], kind="stable")[:top_k]]:
        while i >= 0 and not kept[i]:
            kept[i] = True
            i = up[i]
    return kept


def decode_paths(probs: np.ndarray, up: np.ndarray) -> np.ndarray:
    """One path per text (single-label hierarchy): the most probable top-level node, then its most probable
    child, down to a leaf."""
    children = {i: np.flatnonzero(up == i) for i in range(-1, len(up))}
    chosen = np.zeros(probs.shape, dtype=bool)
    for row, p in enumerate(probs):
        options = children[-1]
        while len(options):
            best = options[int(np.argmax(p[options]))]
            chosen[row, best] = True
            options = children[best]
    return chosen


def tune_thresholds(probs: np.ndarray, gold: np.ndarray, default: float) -> np.ndarray:
    """Per label, the threshold of ``GRID`` that maximises that label's F1 on (``probs``, ``gold``) (ties: the one
    nearest ``default``); a label without a positive text keeps ``default``."""
    from sklearn.metrics import f1_score

    scores = np.stack([f1_score(gold, probs >= t, average=None, zero_division=0) for t in GRID])  # thresholds x labels
    nearest = np.argsort(np.abs(GRID - default), kind="stable")
    best = nearest[np.argmax(scores[nearest], axis=0)]
    tuned = GRID[best].astype(np.float32)
    tuned[gold.sum(axis=0) == 0] = default
    return tuned

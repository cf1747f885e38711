"""evaluate's metrics are computed in numpy (``evaluation.counts``: the runtime install has no scikit-learn) and equal
scikit-learn's, to the last bit, on random labels: one label per text (with labels the model never had) and label
sets (with label levels, empty rows and columns)."""

import numpy as np
import pytest
from sklearn.metrics import (
    accuracy_score,
    confusion_matrix,
    f1_score,
    hamming_loss,
    precision_recall_fscore_support,
)

from ernie_ft.evaluation.classification import classification_metrics, confusion
from ernie_ft.evaluation.multilabel import multilabel_metrics


@pytest.mark.parametrize("seed", range(40))
def test_one_label_per_text_scores_as_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    labels = ["正面", "负面", "中性", "unused"][: rng.integers(2, 5)]
    pool = [*labels, "new"]  # "new": a gold or predicted label the model never had
    n = int(rng.integers(1, 60))
    gold = [pool[i] for i in rng.integers(0, len(pool) - (seed % 2), n)]
    pred = [pool[i] for i in rng.integers(0, len(pool), n)] if seed % 3 else list(gold)
    names, matrix = confusion(gold, pred, labels)
    assert np.array_equal(matrix, confusion_matrix(gold, pred, labels=names)) and matrix.dtype == np.int64
    m = classification_metrics(gold, pred, labels)
    present = [name for name in names if name in set(gold) | set(pred)]
    macro = precision_recall_fscore_support(gold, pred, labels=present, average="macro", zero_division=0)
    per_class = precision_recall_fscore_support(gold, pred, labels=names, average=None, zero_division=0)
    assert m["accuracy"] == accuracy_score(gold, pred)
    assert (m["macro_precision"], m["macro_recall"], m["macro_f1"]) == macro[:3]
    assert [tuple(row.values()) for row in m["per_class"].values()] == list(zip(*per_class))


@pytest.mark.parametrize("seed", range(40))
def test_label_sets_score_as_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    texts, n_labels = int(rng.integers(1, 40)), int(rng.integers(2, 7))  # one column: see the test below
    gold = rng.random((texts, n_labels)) < rng.uniform(0, 0.6)
    pred = gold ^ (rng.random((texts, n_labels)) < rng.uniform(0, 0.5))
    levels = list(rng.integers(1, 3, n_labels))
    m = multilabel_metrics(gold, pred, [f"l{i}" for i in range(n_labels)], levels)
    micro = precision_recall_fscore_support(gold, pred, average="micro", zero_division=0)
    assert (m["micro_precision"], m["micro_recall"], m["micro_f1"]) == micro[:3]
    assert m["samples_f1"] == f1_score(gold, pred, average="samples", zero_division=1)
    assert m["subset_accuracy"] == accuracy_score(gold, pred)
    assert m["hamming_loss"] == hamming_loss(gold, pred)
    present = np.flatnonzero(gold.any(axis=0) | pred.any(axis=0))
    macro = f1_score(gold, pred, labels=present, average="macro", zero_division=0) if len(present) else 0.0
    assert m["macro_f1"] == macro
    per_class = precision_recall_fscore_support(gold, pred, average=None, zero_division=0)
    assert [tuple(row.values()) for row in m["per_class"].values()] == list(zip(*per_class))
    for level in set(levels) if max(levels) > 1 else ():
        cols = [i for i, depth in enumerate(levels) if depth == level]
        if len(cols) == 1:  # scikit-learn reads one column as a binary target: the label's own F1 is its binary F1
            level_f1 = f1_score(gold[:, cols[0]], pred[:, cols[0]], zero_division=0)
        else:
            level_f1 = f1_score(gold[:, cols], pred[:, cols], average="micro", zero_division=0)
        assert m[f"level{level}_micro_f1"] == level_f1


def test_a_level_of_one_label_scores_that_label_not_its_absence():
    """A label level with a single label (or a model with one label): its F1 is the label's, where scikit-learn,
    given one column, scored it as a binary target (micro: the accuracy over present and absent; macro with the
    column's index as label: the F1 of its absence)."""
    gold = np.array([[1, 1], [1, 0], [0, 0], [1, 0]], dtype=bool)
    pred = np.array([[1, 1], [0, 0], [0, 1], [1, 0]], dtype=bool)
    m = multilabel_metrics(gold, pred, ["体育", "体育|足球"], [1, 2])
    assert m["level1_micro_f1"] == m["level1_macro_f1"] == f1_score(gold[:, 0], pred[:, 0]) == 0.8
    assert m["level2_micro_f1"] == m["level2_macro_f1"] == 2 / 3

"""The --multi-label mode of ``baseline_tfidf.py``: one-vs-rest logistic regression over label nodes."""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from ernie_ft.classify import decoding
from ernie_ft.classify.labels import as_labels, depths, path_nodes
from ernie_ft.evaluation.multilabel import label_matrix, multilabel_metrics

C_GRID = (2.0, 8.0, 32.0)
KEPT = ("micro_f1", "macro_f1", "samples_f1", "subset_accuracy")


def run_multilabel(args, read_split, make_features) -> None:
    """Fit, choose C on dev, score test; print one JSON line (see the module docstring of baseline_tfidf)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    start = time.perf_counter()
    splits = [read_split(path, args.text_column, args.label_column) for path in (args.train, args.dev, args.test)]
    sets = [[path_nodes(as_labels(v, args.label_separator), args.hierarchy_separator) for v in s[1]] for s in splits]
    labels = sorted({node for nodes in sets[0] for node in nodes})
    gold = [label_matrix(nodes, labels) for nodes in sets]
    up, levels = decoding.parents(labels, args.hierarchy_separator), depths(labels, args.hierarchy_separator)
    vectorizer = make_features("char1-3")
    x = [vectorizer.fit_transform(splits[0][0]), *(vectorizer.transform(s[0]) for s in splits[1:])]
    best = None
    for c in C_GRID:
        model = OneVsRestClassifier(LogisticRegression(C=c, max_iter=2000), n_jobs=1).fit(x[0], gold[0])
        dev_probs = model.predict_proba(x[1])
        scores = multilabel_metrics(gold[1], decoding.decode(dev_probs, np.full(len(labels), 0.5), up), labels)
        print(f"char1-3 C={c}: dev micro_f1 {scores['micro_f1']:.4f}", file=sys.stderr)
        if best is None or scores["micro_f1"] > best[0]:
            best = (scores["micro_f1"], c, model, dev_probs)
    _, c, model, dev_probs = best
    test_probs = model.predict_proba(x[2])
    tuned = decoding.tune_thresholds(dev_probs, gold[1], 0.5)
    result = {"labels": len(labels), "features": "char1-3", "C": c}
    for name, thresholds in (("threshold 0.5", np.full(len(labels), 0.5)), ("tuned on dev", tuned)):
        for split, probs, truth in (("dev", dev_probs, gold[1]), ("test", test_probs, gold[2])):
            scores = multilabel_metrics(truth, decoding.decode(probs, thresholds, up), labels, levels)
            kept = [k for k in scores if k in KEPT or (k.startswith("level") and k.endswith("micro_f1"))]
            result[f"{split} ({name})"] = {k: round(scores[k], 4) for k in kept}
    result["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(result, ensure_ascii=False))

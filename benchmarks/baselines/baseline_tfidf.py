"""TF-IDF + logistic-regression baseline for a text-classification split, to compare ERNIE against.

    python benchmarks/baselines/baseline_tfidf.py --train T --dev D --test X \
        [--text-column text_a] [--label-column label]

Reads header-ed TSV, CSV or JSONL (chosen by file extension). Two feature sets are tried, character
1-3-gram TF-IDF alone and the same plus jieba word unigrams (a FeatureUnion); each is fitted with C
from a small grid, and the (features, C) pair with the best dev accuracy is scored on test; on a tie
the earlier, simpler one wins. On ChnSentiCorp the two tie on dev (accuracy 0.9175: characters alone
at C=16, characters + words at C=4), so characters alone is kept: jieba words add tokenising time
and no accuracy there. The script reports whichever wins on the data it is given.
Prints one JSON line: {"dev": {"accuracy", "macro_f1"}, "test": {...}, "features": ..., "C": ...}.
Progress goes to stderr.

With --multi-label (labels joined by --label-separator, optionally paths split at --hierarchy-separator as
``classify`` does: every prefix is a node) it fits one-vs-rest logistic regression on character 1-3-gram TF-IDF,
one binary model per node, picks C by dev micro-F1 at threshold 0.5, and decodes as ``classify`` does (a node
only with its parent); it reports micro/macro F1 (and per level) at 0.5 and with per-label thresholds tuned on
dev (``classify --tune-thresholds``'s rule).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time

from ernie_ft.evaluation.classification import classification_metrics

C_GRID = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


def read_split(path: str, text_column: str, label_column: str) -> tuple[list[str], list[str]]:
    """(texts, labels) from a header-ed .tsv/.csv file or a .jsonl file of objects."""
    with open(path, encoding="utf-8", newline="") as handle:
        if path.endswith((".jsonl", ".json")):
            rows = [json.loads(line) for line in handle if line.strip()]
        elif path.endswith(".csv"):
            rows = list(csv.DictReader(handle))
        else:
            # Review text holds stray quotes; TSV here means tab-separated with no quoting.
            rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    missing = {text_column, label_column} - set(rows[0] if rows else ())
    if missing:
        sys.exit(f"{path}: no column {', '.join(sorted(missing))}; use --text-column/--label-column")
    return [str(row[text_column]) for row in rows], [str(row[label_column]) for row in rows]


def make_features(name: str):
    """An unfitted vectorizer: "char1-3" or "char1-3+words" (jieba word unigrams added)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import FeatureUnion

    chars = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), sublinear_tf=True, min_df=2)
    if name == "char1-3":
        return chars
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)  # its dictionary-loading chatter is not our output
    words = TfidfVectorizer(tokenizer=jieba.lcut, token_pattern=None, lowercase=True, sublinear_tf=True, min_df=2)
    return FeatureUnion([("chars", chars), ("words", words)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--dev", required=True)
    parser.add_argument("--test", required=True)
    parser.add_argument("--text-column", default="text_a")
    parser.add_argument("--label-column", default="label")
    parser.add_argument("--multi-label", action="store_true", help="several labels per text: one-vs-rest")
    parser.add_argument("--label-separator", default="|", help="with --multi-label: what joins a text's labels")
    parser.add_argument("--hierarchy-separator", help="with --multi-label: labels are paths split at this")
    args = parser.parse_args()
    if args.multi_label:
        from baseline_tfidf_multilabel import run_multilabel

        return run_multilabel(args, read_split, make_features)

    from sklearn.linear_model import LogisticRegression

    start = time.perf_counter()
    train, dev, test = (
        read_split(path, args.text_column, args.label_column) for path in (args.train, args.dev, args.test)
    )
    labels = sorted(set(train[1]))
    best = None
    for features in ("char1-3", "char1-3+words"):
        vectorizer = make_features(features)
        x_train = vectorizer.fit_transform(train[0])
        x_dev = vectorizer.transform(dev[0])
        for c in C_GRID:
            model = LogisticRegression(C=c, max_iter=2000).fit(x_train, train[1])
            dev_scores = classification_metrics(dev[1], list(model.predict(x_dev)), labels)
            print(f"{features} C={c}: dev accuracy {dev_scores['accuracy']:.4f}", file=sys.stderr)
            if best is None or dev_scores["accuracy"] > best[0]["accuracy"]:
                best = (dev_scores, features, c, vectorizer, model)
    dev_scores, features, c, vectorizer, model = best
    test_scores = classification_metrics(test[1], list(model.predict(vectorizer.transform(test[0]))), labels)

    def brief(scores: dict) -> dict:
        return {"accuracy": round(scores["accuracy"], 4), "macro_f1": round(scores["macro_f1"], 4)}

    print(
        json.dumps(
            {
                "dev": brief(dev_scores),
                "test": brief(test_scores),
                "features": features,
                "C": c,
                "seconds": round(time.perf_counter() - start, 1),
            },
            ensure_ascii=False,
        )
    )


if __name__ == "__main__":
    main()

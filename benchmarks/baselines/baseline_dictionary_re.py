"""Dictionary baseline for relation extraction: the training triples, predicted wherever both their strings occur.

    python benchmarks/baselines/baseline_dictionary_re.py --train ../shared/data/duie-5000/train.jsonl \
        --test ../shared/data/duie-5000/test.jsonl

Every (subject text, predicate, object text) of ``--train`` (as scored: placed in its text or not) is predicted for
a ``--test`` text when both its subject string and its object string occur in that text. No learning: a floor that
a trained model has to beat. Files are read as ``python -m ernie_ft relation`` reads them and scored by the same
rule (``relation.decoding``: DuIE's, per text, book-title marks dropped, lower case). Prints one JSON line
{"triple_precision", "triple_recall", "triple_f1", "triples"}.
"""

from __future__ import annotations

import argparse
import json
import sys

from ernie_ft.errors import UserError
from ernie_ft.relation.decoding import normalise, prf
from ernie_ft.relation.formats import read_relations


def predict(dictionary: set, text: str) -> set:
    """The dictionary's triples whose subject and object both occur in ``text``, normalised."""
    return {(normalise(s), p, normalise(o)) for s, p, o in dictionary if s in text and o in text}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--test", required=True)
    args = parser.parse_args(argv)
    try:
        dictionary = {t for e in read_relations(args.train, "--train") for t in e.gold}
        test = read_relations(args.test, "--test")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    tp = predicted = gold = 0
    for e in test:
        guess, truth = predict(dictionary, e.text), {(normalise(s), p, normalise(o)) for s, p, o in e.gold}
        tp, predicted, gold = tp + len(guess & truth), predicted + len(guess), gold + len(truth)
    scores = {f"triple_{k}": round(v, 4) for k, v in prf(tp, predicted, gold).items()}
    print(json.dumps({**scores, "triples": len(dictionary), "predicted": predicted, "gold": gold}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

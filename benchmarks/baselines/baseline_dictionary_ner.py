"""Dictionary baseline for nested NER: every occurrence of every training entity string, nesting allowed.

    python benchmarks/baselines/baseline_dictionary_ner.py --train ../shared/data/cmeee-v2/train.json \
        --test ../shared/data/cmeee-v2/test.json [--predictions pred.jsonl]

The dictionary maps each entity string of ``--train`` to its most frequent type there (ties: the first type in
sorted order). Every occurrence of every dictionary string in a ``--test`` text is predicted, overlapping and
nested occurrences included, so a string inside a longer one is found too. No learning: a floor that a trained
model has to beat. Files are read as ``ner --nested`` reads them (CMeEE's JSON array, span JSONL, CLUENER,
doccano, Label Studio; nested entities kept) and scored by ``ernie_ft.evaluation.entities.entity_metrics``, the
trainer's strict scorer (exact start, end and type). Prints one JSON line {"precision", "recall", "f1", ...}.

``--predictions FILE`` scores a ``predict`` output (one {"text", "entities": [{"start", "end", "type"}]} per
line, in --test's order) against --test's full gold instead, e.g. a flat tagger's against nested gold, and says how
many gold entities a flat tagger could not hold (those ``--overlapping keep-longest`` drops).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys

from ernie_ft.errors import UserError
from ernie_ft.evaluation.entities import entity_metrics
from ernie_ft.ner.formats import read_ner
from ernie_ft.ner.tags import check_spans


def build_dictionary(examples) -> dict[str, str]:
    """{entity string: its most frequent type in ``examples``}."""
    types: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for e in examples:
        for start, end, kind in e.entities:
            types[e.text[start:end]][kind] += 1
    return {name: min(counts, key=lambda k: (-counts[k], k)) for name, counts in types.items()}


def tag_all(text: str, dictionary: dict[str, str], longest: int) -> list[tuple[int, int, str]]:
    """(start, end, type) of every occurrence of every dictionary string in ``text``, overlaps included."""
    return [
        (i, j, dictionary[text[i:j]])
        for i in range(len(text))
        for j in range(i + 1, min(len(text), i + longest) + 1)
        if text[i:j] in dictionary
    ]


def read_predictions(path: str, n: int) -> list[list[tuple[int, int, str]]]:
    with open(path, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    if len(records) != n:
        raise UserError(f"--predictions {path}: {len(records)} records for {n} --test texts; predict --test's texts")
    return [[(e["start"], e["end"], e["type"]) for e in r["entities"]] for r in records]


def flat_drops(examples) -> int:
    """How many gold entities a flat tagger cannot hold: those ``--overlapping keep-longest`` drops."""
    return sum(len(check_spans(list(e.entities), e.text, "gold", "keep-longest")[1]) for e in examples)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True, help="labelled NER file the dictionary is built from")
    parser.add_argument("--test", required=True, help="labelled NER file to score (nested entities kept)")
    parser.add_argument("--predictions", help="score this predict output against --test instead of the dictionary")
    args = parser.parse_args(argv)
    try:
        train = read_ner(args.train, "--train", overlapping="nested")
        test = read_ner(args.test, "--test", overlapping="nested")
        if args.predictions:
            predicted = read_predictions(args.predictions, len(test))
        else:
            dictionary = build_dictionary(train)
            longest = max(map(len, dictionary), default=0)
            predicted = [tag_all(e.text, dictionary, longest) for e in test]
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    types = sorted({kind for e in train for *_, kind in e.entities})
    scores = entity_metrics([e.entities for e in test], predicted, types)
    extra = {"flat_tagger_cannot_hold": flat_drops(test)} if args.predictions else {"dictionary": len(dictionary)}
    print(
        json.dumps(
            {k: round(scores[k], 4) if isinstance(scores[k], float) else scores[k] for k in scores if k != "per_type"}
            | extra
            | {"per_type_f1": {t: round(s["f1"], 4) for t, s in scores["per_type"].items()}},
            ensure_ascii=False,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

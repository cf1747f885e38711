"""Dictionary NER baseline: tag the strings that were entities in the training file.

    python benchmarks/baselines/baseline_ner.py --train ../shared/data/cluener2020/train.json \
        --dev ../shared/data/cluener2020/dev.json [--min-entity-share 0.5]

The dictionary holds every entity string of ``--train`` with its most frequent type, kept when at
least ``--min-entity-share`` of the string's occurrences in the training texts are labelled as an
entity, occurrences inside a longer entity aside (so a word that is usually not a name does not
tag every occurrence). A text is tagged left to right by the longest dictionary string at each position.
No learning: a floor that a trained tagger has to beat. The files are read by
``ernie_ft.ner_formats`` (any format ``ner`` reads; CLUENER's nested entities keep the longest) and
scored by ``ernie_ft.ner.entity_metrics``, the trainer's strict entity-level scorer. Prints one
JSON line {"precision", "recall", "f1", "dictionary", ...}; notes go to stderr.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys

from ernie_ft.errors import UserError
from ernie_ft.evaluation.entities import entity_metrics
from ernie_ft.ner.formats import read_ner


def build_dictionary(examples, min_entity_share: float) -> dict[str, str]:
    """{entity string: its most frequent type} for the strings labelled often enough where they occur."""
    types: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for e in examples:
        for start, end, kind in e.entities:
            types[e.text[start:end]][kind] += 1
    occurrences = collections.Counter()
    for e in examples:  # each occurrence of each string, labelled or not, but not inside a longer entity
        for name in types:
            start = e.text.find(name)
            while start >= 0:
                end = start + len(name)
                occurrences[name] += not any(s <= start and end <= t and t - s > end - start for s, t, _ in e.entities)
                start = e.text.find(name, start + 1)
    return {
        name: counts.most_common(1)[0][0]
        for name, counts in types.items()
        if sum(counts.values()) >= min_entity_share * occurrences[name]
    }


def tag(text: str, dictionary: dict[str, str], longest: int) -> list[tuple[int, int, str]]:
    """Non-overlapping (start, end, type) spans: the longest dictionary string at each position, left to right."""
    spans, i = [], 0
    while i < len(text):
        end = next((j for j in range(min(len(text), i + longest), i, -1) if text[i:j] in dictionary), None)
        if end is None:
            i += 1
            continue
        spans.append((i, end, dictionary[text[i:end]]))
        i = end
    return spans


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True, help="labelled NER file the dictionary is built from")
    parser.add_argument("--dev", required=True, help="labelled NER file to score")
    parser.add_argument(
        "--min-entity-share",
        type=float,
        default=0.5,
        help="keep a string when at least this share of its occurrences in --train are entities",
    )
    args = parser.parse_args(argv)
    if not 0 <= args.min_entity_share <= 1:
        print(f"error: --min-entity-share {args.min_entity_share}: give a share between 0 and 1", file=sys.stderr)
        return 2
    try:
        train = read_ner(args.train, "--train", overlapping="keep-longest")
        dev = read_ner(args.dev, "--dev", overlapping="keep-longest")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    dictionary = build_dictionary(train, args.min_entity_share)
    longest = max(map(len, dictionary), default=0)
    predicted = [tag(e.text, dictionary, longest) for e in dev]
    types = sorted({kind for e in train for *_, kind in e.entities})
    scores = entity_metrics([e.entities for e in dev], predicted, types)
    print(
        json.dumps(
            {k: scores[k] for k in ("precision", "recall", "f1", "support", "predicted")}
            | {
                "dictionary": len(dictionary),
                "per_type_f1": {t: round(s["f1"], 4) for t, s in scores["per_type"].items()},
            },
            ensure_ascii=False,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

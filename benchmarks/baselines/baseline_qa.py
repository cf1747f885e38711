"""Trivial extractive-QA baseline: answer with the context sentence that shares the most characters with the question.

    python benchmarks/baselines/baseline_qa.py --input ../shared/data/cmrc2018/cmrc2018_dev.json \
        [--qa-metric cmrc2018] [--output predictions.json]

Sentences end at 。！？!?；; or a line break. The score of a sentence is the number of distinct
characters (not punctuation or spaces) it has in common with the question; ties go to the earlier
sentence. No learning: a floor that a trained model has to beat. The input is read (and answer
offsets re-located) by ``ernie_ft.qa_formats`` and scored by ``ernie_ft.qa_metrics``, the code the
trainer uses. Prints one JSON line {"em", "f1", "metric", "questions", ...}; notes go to stderr.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata

from ernie_ft.data.squad import read_qa
from ernie_ft.errors import UserError
from ernie_ft.evaluation.squad import METRICS, qa_scores

SENTENCE_END = re.compile(r"(?<=[。！？!?；;\n])")


def content_chars(text: str) -> set[str]:
    """Distinct characters of ``text`` other than punctuation, symbols and whitespace."""
    return {c for c in text if not c.isspace() and unicodedata.category(c)[0] not in "PZS"}


def best_sentence(question: str, context: str) -> str:
    """The sentence of ``context`` with the most characters in common with ``question``."""
    sentences = [s.strip() for s in SENTENCE_END.split(context) if s.strip()]
    wanted = content_chars(question)
    return max(sentences, key=lambda s: len(wanted & content_chars(s)), default="")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="SQuAD-style JSON or JSONL file with answers")
    parser.add_argument("--qa-metric", default="cmrc2018", choices=METRICS)
    parser.add_argument("--output", help="write the predictions here as JSON {id: answer}")
    args = parser.parse_args(argv)
    try:
        examples, stats = read_qa(args.input, "--input")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for note in stats.notes("--input", args.input):
        print(f"note: {note}", file=sys.stderr)
    predictions = [best_sentence(e.question, e.context) for e in examples]
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump({e.id: p for e, p in zip(examples, predictions)}, f, ensure_ascii=False, indent=1)
    print(json.dumps(qa_scores(predictions, [list(e.answers) for e in examples], args.qa_metric)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

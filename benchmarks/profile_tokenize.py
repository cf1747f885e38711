"""Where tokenisation's time goes: the text pipeline per text, in parts, beside tokenizers' BERT WordPiece.

    python benchmarks/profile_tokenize.py [--rounds 5] [--top 12] [--output runs/profile_tokenize.md]

Texts from ../shared/data (or $ERNIE_FT_SHARED_DATA): the 1,200 ChnSentiCorp dev reviews, the same
cut to 120 characters, and the 1,343 CLUENER dev sentences, with the ERNIE 3.0 vocabulary. Each row
gives microseconds per text: CPU time of this process (other jobs on a shared machine inflate it less
than the wall time, also shown), best of --rounds:

- ``encode_many``: what training, ``predict`` and ``serve`` call today (word ids: jieba runs);
- ``encode_many(word_ids=False)``: the fast path (normalisation and the Rust tokenizer only);
- its parts: normalisation, the pipeline's Rust WordPiece on the normalised texts, jieba on them
  (a vocabulary extension needs jieba's words, so an extended pipeline pays this row either way);
- ``tokenizers.BertWordPieceTokenizer`` with the same vocabulary (what transformers'
  ``BertTokenizerFast`` runs, optimum's baseline), ids and offsets read back into Python.

Then cProfile's top functions (own time) of both ``encode_many`` calls on the ChnSentiCorp reviews.
tokenizers runs in one thread (TOKENIZERS_PARALLELISM=false), so the figures are per core.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import time
from pathlib import Path

from cpu import line as cpu_line

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # before tokenizers is imported: one thread

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ERNIE_FT_SHARED_DATA", ROOT.parent / "shared" / "data"))


def text_sets() -> dict[str, list[str]]:
    lines = (SHARED / "chnsenticorp" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    reviews = [line.split("\t", 1)[1] for line in lines]
    with open(SHARED / "cluener2020" / "dev.json", encoding="utf-8") as f:
        sentences = [json.loads(line)["text"] for line in f]
    return {
        "ChnSentiCorp dev": reviews,
        "ChnSentiCorp dev, 120 chars": [t[:120] for t in reviews],
        "CLUENER dev": sentences,
    }


def per_text(run, items: list, rounds: int) -> tuple[float, float]:
    """(CPU, wall) microseconds per item of ``run(items)``, each the best of ``rounds``."""
    cpu = wall = float("inf")
    for _ in range(rounds):
        c, w = time.process_time(), time.perf_counter()
        run(items)
        cpu, wall = min(cpu, time.process_time() - c), min(wall, time.perf_counter() - w)
    return cpu / len(items) * 1e6, wall / len(items) * 1e6


def rows(pipe, bert_wordpiece, texts: list[str], rounds: int) -> list[tuple[str, tuple[float, float]]]:
    from ernie_ft.text.pipeline import normalize_text

    norms = [normalize_text(t, pipe._keep)[0] for t in texts]
    return [
        ("encode_many (word ids)", per_text(pipe.encode_many, texts, rounds)),
        ("encode_many(word_ids=False)", per_text(lambda ts: pipe.encode_many(ts, word_ids=False), texts, rounds)),
        ("  normalisation", per_text(lambda ts: [normalize_text(t, pipe._keep) for t in ts], texts, rounds)),
        (
            "  Rust WordPiece, ids + offsets",
            per_text(
                lambda ns: [(e.ids, e.offsets) for e in pipe._tok.encode_batch(ns, add_special_tokens=False)],
                norms,
                rounds,
            ),
        ),
        ("  jieba", per_text(lambda ns: [pipe._spans(n) for n in ns], norms, rounds)),
        (
            "BertWordPieceTokenizer, ids + offsets",
            per_text(
                lambda ts: [(e.ids, e.offsets) for e in bert_wordpiece.encode_batch(ts, add_special_tokens=False)],
                texts,
                rounds,
            ),
        ),
    ]


def top_functions(run, top: int) -> str:
    profile = cProfile.Profile()
    profile.enable()
    run()
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(top)
    text = out.getvalue()
    return text[text.index("ncalls") :].rstrip()  # the table, without pstats' preamble


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed passes per row; the best is kept")
    parser.add_argument("--top", type=int, default=12, help="functions listed per profile")
    parser.add_argument("--output", help="also write the report (markdown) to this file")
    args = parser.parse_args()
    print(cpu_line(), flush=True)  # the CPU every row names

    from tokenizers import BertWordPieceTokenizer

    from ernie_ft.text.pipeline import TextPipeline

    vocab = str(SHARED / "ernie-3.0-vocab" / "vocab.txt")
    pipe = TextPipeline(vocab)
    bert_wordpiece = BertWordPieceTokenizer(vocab, lowercase=True)
    sets = text_sets()
    pipe.encode_many(sets["CLUENER dev"][:20])  # jieba loads its dictionary once per process

    report = [
        f"# Tokenisation profile ({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start)",
        "",
        "Microseconds per text: CPU time (wall time), best of " + str(args.rounds) + " passes.",
        "",
        "| | " + " | ".join(f"{name} ({sum(map(len, ts)) / len(ts):.0f} chars)" for name, ts in sets.items()) + " |",
        "|---|" + "---|" * len(sets),
    ]
    table = {name: rows(pipe, bert_wordpiece, texts, args.rounds) for name, texts in sets.items()}
    for i, (label, _) in enumerate(next(iter(table.values()))):
        cells = [f"{table[name][i][1][0]:.0f} ({table[name][i][1][1]:.0f})" for name in sets]
        report.append(f"| {label} | " + " | ".join(cells) + " |")
    reviews = sets["ChnSentiCorp dev"]
    for title, run in (
        ("encode_many (word ids)", lambda: pipe.encode_many(reviews)),
        ("encode_many(word_ids=False)", lambda: pipe.encode_many(reviews, word_ids=False)),
    ):
        report += ["", f"## cProfile: {title}, ChnSentiCorp dev", "", "```", top_functions(run, args.top), "```"]
    report.append(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    text = "\n".join(report) + "\n"
    print(text)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()

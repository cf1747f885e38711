"""How often an NER entity or QA answer edge falls inside a learned vocabulary-extension piece.

    python experiments/span_boundaries.py [--data ../shared/data] [--sizes 2000 8000 20000] [--num-proc 2]
                                      [--output runs/span_boundaries.md]

CLUENER2020: an extension is learned from the train texts and the entities of train and dev are
checked. CMRC 2018: learned from the trial and dev contexts (the official train split is not
available here), the dev answers are checked, each re-located near its ``answer_start`` when that
does not point at the answer text. An edge (start or end of a span) is "inside" a token when the
token starts before it and ends after it. Edges inside base WordPiece tokens (Latin words, digit
runs) are counted too: they happen without any extension. The table goes to stdout and --output.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from ernie_ft.text.extension import learn, write
from ernie_ft.text.pipeline import TextPipeline


def cluener(path: Path) -> list[tuple[str, list[tuple[int, int]]]]:
    """(text, [(start, end_exclusive), ...]) per record."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        spans = [(s, e + 1) for kind in record.get("label", {}).values() for where in kind.values() for s, e in where]
        out.append((record["text"], spans))
    return out


def cmrc(path: Path) -> tuple[list[tuple[str, list[tuple[int, int]]]], int, int]:
    """(context, answer spans) per paragraph, how many answer_start values had to be re-located,
    and how many answers are not in their context at all (left out)."""
    out, fixed, missing = [], 0, 0
    for article in json.loads(path.read_text(encoding="utf-8"))["data"]:
        for paragraph in article["paragraphs"]:
            context, spans = paragraph["context"], []
            for qa in paragraph["qas"]:
                for answer in qa["answers"]:
                    text, start = answer["text"], answer["answer_start"]
                    if context[start : start + len(text)] != text:
                        hits = [i for i in range(len(context)) if context.startswith(text, i)]
                        if not hits:
                            missing += 1
                            continue
                        start = min(hits, key=lambda i: abs(i - start))
                        fixed += 1
                    spans.append((start, start + len(text)))
            out.append((context, spans))
    return out, fixed, missing


def edges_inside(pipe: TextPipeline, records) -> tuple[int, int, int, int]:
    """(spans, spans with an edge inside a learned piece, spans with an edge inside a base token, edges)."""
    encodings = pipe.encode_many([text for text, _ in records], num_proc=ARGS.num_proc)
    base_size = pipe.extension.base_size if pipe.extension else pipe.vocab_size
    n = in_piece = in_base = 0
    for (_, spans), enc in zip(records, encodings):
        inner = {}  # edge position -> True if inside a learned piece, False if inside a base token
        for tid, (s, e) in zip(enc.ids, enc.offsets):
            for edge in range(s + 1, e):
                inner[edge] = tid >= base_size
        for s, e in spans:
            n += 1
            hits = [inner[x] for x in (s, e) if x in inner]
            in_piece += any(hits)
            in_base += any(h is False for h in hits)
    return n, in_piece, in_base, 2 * n


def tokens_per_char(pipe: TextPipeline, texts: list[str]) -> float:
    return sum(len(e.ids) for e in pipe.encode_many(texts, num_proc=ARGS.num_proc)) / sum(map(len, texts))


def main() -> None:
    data = Path(ARGS.data)
    vocab = str(data / "ernie-3.0-vocab" / "vocab.txt")
    base = TextPipeline(vocab)
    train = cluener(data / "cluener2020" / "train.json")
    dev = cluener(data / "cluener2020" / "dev.json")
    cmrc_dev, fixed_dev, missing_dev = cmrc(data / "cmrc2018" / "cmrc2018_dev.json")
    cmrc_trial, fixed_trial, _ = cmrc(data / "cmrc2018" / "cmrc2018_trial.json")
    corpora = {
        "CLUENER2020": ([t for t, _ in train], {"train": train, "dev": dev}),
        "CMRC 2018": ([t for t, _ in cmrc_trial + cmrc_dev], {"dev": cmrc_dev}),
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (corpus, splits) in corpora.items():
            for size in ARGS.sizes:
                start = time.perf_counter()
                learned = learn(base, corpus, size, ARGS.min_frequency)
                directory = f"{tmp}/{name.split()[0]}-{size}"
                write(directory, learned, vocab, base.vocab_size, {})
                pipe = TextPipeline(vocab, vocab_extension=directory)
                ratio = (tokens_per_char(base, corpus), tokens_per_char(pipe, corpus))
                for split, records in splits.items():
                    n, in_piece, in_base, _ = edges_inside(pipe, records)
                    rows.append((name, split, len(learned["pieces"]), n, in_piece, in_base, *ratio))
                print(f"{name} {size}: {time.perf_counter() - start:.0f}s", file=sys.stderr)
    lines = [
        "| data | split | pieces | spans | edge inside a learned piece | edge inside a base token "
        "| tokens/char base -> extended |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, split, pieces, n, in_piece, in_base, before, after in rows:
        lines.append(
            f"| {name} | {split} | {pieces:,} | {n:,} | {in_piece:,} ({in_piece / n:.1%}) | "
            f"{in_base:,} ({in_base / n:.1%}) | {before:.3f} -> {after:.3f} |"
        )
    lines.append(
        f"\nCMRC 2018 dev: {fixed_dev} answers re-located near answer_start, {missing_dev} left out "
        f"(answer text not in the context). Learned with min frequency {ARGS.min_frequency}; a size "
        "the corpus cannot fill gives fewer pieces."
    )
    table = "\n".join(lines)
    print(table)
    if ARGS.output:
        Path(ARGS.output).parent.mkdir(parents=True, exist_ok=True)
        Path(ARGS.output).write_text(table + "\n", encoding="utf-8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 8000, 20000])
    parser.add_argument("--min-frequency", type=int, default=2)
    parser.add_argument("--num-proc", type=int, default=1)
    parser.add_argument("--output", default="runs/span_boundaries.md")
    ARGS = parser.parse_args()
    main()

"""Training tokens/s of multi-label classification against single-label on the same texts, in one invocation.

    python benchmarks/bench_multilabel.py [--texts 3200] [--steps 60] [--rounds 3] [--threads 2]

The texts are the first --texts of DuEE event types (../shared/data/duee-event-types/train.tsv). The single-label
run learns each text's first label (65 types, softmax); the multi-label run all of them with the hierarchy (74
nodes: 9 classes and 65 types, a sigmoid each). Both train ``scratch:tiny`` with the ERNIE 3.0 vocabulary through
the command line for --steps steps (same sampler, so the same batches of the same lengths), logging every step;
the two alternate --rounds times because this machine's speed drifts over minutes. Per run: the median of the
per-step tokens/s after the first 5 steps. Prints a table of rounds and the median ratio multi / single.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

from cpu import line as cpu_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "..", "shared", "data")


def write_splits(folder: str, count: int) -> tuple[str, str]:
    """(single-label TSV, multi-label TSV) of the first ``count`` DuEE training texts."""
    with open(os.path.join(DATA, "duee-event-types", "train.tsv"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[:count]
    single, multi = os.path.join(folder, "single.tsv"), os.path.join(folder, "multi.tsv")
    with open(single, "w", encoding="utf-8") as s, open(multi, "w", encoding="utf-8") as m:
        s.write("labels\ttext\n")
        m.write("labels\ttext\n")
        for row in rows:
            s.write(f"{row['labels'].split('|')[0]}\t{row['text']}\n")
            m.write(f"{row['labels']}\t{row['text']}\n")
    return single, multi


def tokens_per_s(train: str, multi: bool, steps: int, threads: int, out: str) -> float:
    """Median per-step tokens/s of one training run (steps 6 onwards)."""
    command = [
        sys.executable, "-m", "ernie_ft", "classify", "--train", train, "--label-column", "labels",
        "--model", "scratch:tiny", "--vocab", os.path.join(DATA, "ernie-3.0-vocab", "vocab.txt"),
        "--epochs", "1", "--stop-after-steps", str(steps), "--log-steps", "1", "--threads", str(threads),
        "--lr", "1e-3", "--max-len", "128", "--output", out, "--overwrite",
    ]  # fmt: skip
    if multi:
        command += ["--multi-label", "--label-separator", "|", "--hierarchy-separator", "-"]
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(out, "train_log.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    return statistics.median(r["tokens_per_s"] for r in records if r["step"] > 5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=3200)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(cpu_line(), flush=True)  # the CPU every row names
    ratios = []
    with tempfile.TemporaryDirectory(prefix="bench-multilabel-") as folder:
        single, multi = write_splits(folder, args.texts)
        print("| round | single-label tokens/s | multi-label tokens/s | multi / single |")
        print("|---|---|---|---|")
        for r in range(1, args.rounds + 1):
            one = tokens_per_s(single, False, args.steps, args.threads, os.path.join(folder, "single"))
            many = tokens_per_s(multi, True, args.steps, args.threads, os.path.join(folder, "multi"))
            ratios.append(many / one)
            print(f"| {r} | {one:,.0f} | {many:,.0f} | {many / one:.3f} |", flush=True)
    print(f"median multi / single: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()

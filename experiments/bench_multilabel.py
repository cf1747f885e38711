"""Training tokens/s of multi-label classification against single-label on the same texts, in one process.

    python experiments/bench_multilabel.py [--texts 3200] [--steps 120] [--threads 2]

The texts are the first --texts of DuEE event types (../shared/data/duee-event-types/train.tsv). The single-label
run learns each text's first label (65 types, softmax); the multi-label run all of them with the hierarchy (74
nodes: 9 classes and 65 types, a sigmoid each). Both are set up in this process as the command line sets them up
(``scratch:tiny`` with the ERNIE 3.0 vocabulary, the trainer's ``setup``), and their optimizer steps
(``trainer.train_step``: batching, forward, loss, backward, update) alternate one by one over the same batches,
so the machine's drift and other jobs' load fall on both alike. The first 10 pairs are warm-up. Prints each
kind's median tokens/s and the median of the per-pair ratios multi / single.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))  # cpu.py: the CPU line every benchmark prints first
from cpu import line as cpu_line  # noqa: E402

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


def setup_run(train: str, multi: bool, threads: int, out: str):
    """The trainer's Run for one kind, as ``python -m ernie_ft classify`` builds it."""
    from ernie_ft.cli.train import parse_train_args
    from ernie_ft.task import create_task, resolve_task
    from ernie_ft.training.run import setup

    argv = [
        "--train", train, "--label-column", "labels", "--model", "scratch:tiny",
        "--vocab", os.path.join(DATA, "ernie-3.0-vocab", "vocab.txt"), "--epochs", "1", "--threads", str(threads),
        "--lr", "1e-3", "--max-len", "128", "--output", out, "--overwrite",
    ]  # fmt: skip
    if multi:
        argv += ["--multi-label", "--label-separator", "|", "--hierarchy-separator", "-"]
    task_cls = resolve_task("classify")
    config = parse_train_args(argv, "bench", "bench", task_cls)
    return setup(create_task(task_cls, config.task, "classify"), config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=3200)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(cpu_line(), flush=True)  # the CPU every row names
    from ernie_ft.training.lock import release_output
    from ernie_ft.training.trainer import train_step

    with tempfile.TemporaryDirectory(prefix="bench-multilabel-") as folder:
        single, multi = write_splits(folder, args.texts)
        runs = [setup_run(path, kind, args.threads, os.path.join(folder, name)) for path, kind, name in (
            (single, False, "single"), (multi, True, "multi"))]  # fmt: skip
        batches = runs[0].sampler.batches(0)  # the same texts in both: the same batches
        rates = {0: [], 1: []}
        for step in range(min(args.steps, len(batches))):
            for k in (step % 2, 1 - step % 2):  # who goes first alternates
                _, tokens, seconds, _, _ = train_step(runs[k], [batches[step]])
                if step >= 10:
                    rates[k].append(tokens / seconds)
        for run in runs:
            release_output(run.cfg.train.output)
    ratios = [m / s for s, m in zip(rates[0], rates[1])]
    print("| steps | single-label tokens/s | multi-label tokens/s | multi / single (median of pairs) |")
    print("|---|---|---|---|")
    print(
        f"| {len(ratios)} | {statistics.median(rates[0]):,.0f} | {statistics.median(rates[1]):,.0f} | "
        f"{statistics.median(ratios):.3f} |"
    )


if __name__ == "__main__":
    main()

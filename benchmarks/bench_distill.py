"""Distillation on ChnSentiCorp: a teacher (nano), a student (tiny) on labels alone, the same student distilled.

    python benchmarks/bench_distill.py [--out DIR] [--teacher RUN] [--teacher-epochs 1] [--student-epochs 1] \
        [--labelled N [--unlabelled-rest]] [--temperature 2] [--alpha 0.5] [--skip labels|distilled]
    python benchmarks/bench_distill.py --teacher RUN --sweep 1:0.5 2:0.5 4:0.5 2:0.9 [--labelled N] ...
    python benchmarks/bench_distill.py --teacher RUN --transfer logits hidden [--transfer-weight 1] [--labelled N] ...

Every model starts from random weights with the ERNIE 3.0 vocabulary (max-len 128, stride 32, batch 32) and is
trained by the command line as a user runs it, on ../shared/data/chnsenticorp: the teacher by ``classify``
(``--model scratch:nano``, lr 5e-4) unless --teacher names a trained run; the students (``scratch:tiny``, lr 5e-4)
by ``classify`` on the labels and by ``distill`` from the teacher. With --labelled N the students see the first N
training reviews only, and with --unlabelled-rest the distilled one the other reviews' texts too, as --unlabelled.
The best checkpoint is picked on dev at the end of each epoch; its dev and test accuracy are the trainer's. Documents/s:
``Predictor`` (dygraph, as ``predict`` runs a checkpoint) over the 1,200 dev reviews, tokenisation and windows
included, after a warm-up pass over 64 of them. Prints a Markdown table; with --sweep, one distilled student per
temperature:alpha pair, and their accuracy; with --transfer, one distilled student per --transfer mode of distill
(logits, hidden, hidden+attention), with the teacher's vocabulary (the ERNIE 3.0 one, as every model here), and
their accuracy and wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from cpu import line as cpu_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("ERNIE_FT_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
DATA = os.path.join(SHARED, "chnsenticorp")
VOCAB = os.path.join(SHARED, "ernie-3.0-vocab", "vocab.txt")


def common(epochs: int, out: str) -> list[str]:
    return [
        *("--dev", os.path.join(DATA, "dev.tsv"), "--test", os.path.join(DATA, "test.tsv")),
        *("--vocab", VOCAB, "--max-len", "128", "--stride", "32", "--batch-size", "32", "--lr", "5e-4"),
        *("--epochs", str(epochs), "--log-steps", "50", "--seed", "42", "--output", out, "--overwrite"),
    ]


def run(name: str, argv: list[str], out_dir: str) -> float:
    """Run ``python -m ernie_ft argv`` (its log in OUT/name.log); the wall time in seconds."""
    print(f"{name}: python -m ernie_ft {' '.join(argv)}", file=sys.stderr, flush=True)
    tic = time.perf_counter()
    with open(os.path.join(out_dir, f"{name}.log"), "w", encoding="utf-8") as log:
        status = subprocess.call([sys.executable, "-m", "ernie_ft", *argv], stdout=log, stderr=subprocess.STDOUT)
    if status:
        sys.exit(f"{name} failed (exit {status}); see {log.name}")
    return time.perf_counter() - tic


def split_train(out_dir: str, labelled: int) -> tuple[str, str]:
    """(the first ``labelled`` training reviews as a TSV, the other reviews' texts one per line)."""
    from ernie_ft.data.readers import read_examples

    with open(os.path.join(DATA, "train.tsv"), encoding="utf-8") as f:
        header, *rows = f.read().splitlines()
    first, rest = os.path.join(out_dir, "labelled.tsv"), os.path.join(out_dir, "unlabelled.txt")
    with open(first, "w", encoding="utf-8") as f:
        f.write("\n".join([header, *rows[:labelled]]) + "\n")
    with open(rest, "w", encoding="utf-8") as f:
        f.write("\n".join(e.text for e in read_examples(os.path.join(DATA, "train.tsv"))[labelled:]) + "\n")
    return first, rest


def documents_per_second(model_dir: str) -> float:
    from ernie_ft import Predictor
    from ernie_ft.data.readers import read_examples

    records = [{"text": e.text} for e in read_examples(os.path.join(DATA, "dev.tsv"))]
    predictor = Predictor(model_dir, engine="dygraph")
    predictor(records[:64])
    tic = time.perf_counter()
    predictor(records)
    return len(records) / (time.perf_counter() - tic)


def distilled(args, teacher: str, train: str, extra: list[str], name: str, temperature: str, alpha: str):
    """Distil the tiny student from ``teacher``: (its output directory, the wall time in seconds)."""
    out = os.path.join(args.out, name)
    argv = ["distill", "--teacher", teacher, "--student", "scratch:tiny", "--train", train, *extra]
    argv += ["--temperature", temperature, "--alpha", alpha, *common(args.student_epochs, out)]
    return out, run(name, argv, args.out)


def transfers(args, teacher: str, train: str, extra: list[str]) -> None:
    """A distilled student per --transfer mode: its dev and test accuracy and wall time."""
    print("| --transfer | dev accuracy | test accuracy | training wall time |")
    print("|---|---|---|---|")
    for mode in args.transfer:
        flags = [*extra, "--transfer", mode, "--transfer-weight", args.transfer_weight]
        name = f"transfer-{mode.replace('+', '-')}"
        out, seconds = distilled(args, teacher, train, flags, name, args.temperature, args.alpha)
        print(
            f"| {mode} | {accuracy(out, 'dev'):.4f} | {accuracy(out, 'test'):.4f} | {seconds / 60:.1f} min |",
            flush=True,
        )


def accuracy(out: str, split: str) -> float:
    with open(os.path.join(out, "metrics.json"), encoding="utf-8") as f:
        return json.load(f).get(split, {}).get("accuracy", float("nan"))


def compare(args, teacher: str, train: str, extra: list[str]) -> None:
    """The teacher (trained here unless --teacher), the student on labels alone, the student distilled."""
    runs, seconds = [("teacher (nano)", "teacher", teacher)], {}
    if not args.teacher:
        argv = ["classify", "--train", os.path.join(DATA, "train.tsv"), "--model", "scratch:nano"]
        seconds["teacher"] = run("teacher", [*argv, *common(args.teacher_epochs, teacher)], args.out)
    if "labels" not in args.skip:
        out = os.path.join(args.out, "student-labels")
        argv = ["classify", "--train", train, "--model", "scratch:tiny", *common(args.student_epochs, out)]
        seconds["student-labels"] = run("student-labels", argv, args.out)
        runs.append(("student (tiny), labels alone", "student-labels", out))
    if "distilled" not in args.skip:
        out, seconds["student-distilled"] = distilled(
            args, teacher, train, extra, "student-distilled", args.temperature, args.alpha
        )
        runs.append(("student (tiny), distilled", "student-distilled", out))
    print("| model | dev accuracy | test accuracy | documents/s (predict, dev) | training wall time |")
    print("|---|---|---|---|---|")
    for label, name, out in runs:
        took = f"{seconds[name] / 60:.1f} min" if name in seconds else "(reused)"
        print(
            f"| {label} | {accuracy(out, 'dev'):.4f} | {accuracy(out, 'test'):.4f} | {documents_per_second(out):.0f} "
            f"| {took} |",
            flush=True,
        )


def sweep(args, teacher: str, train: str, extra: list[str]) -> None:
    """A distilled student per --sweep T:ALPHA pair: its dev and test accuracy."""
    print("| temperature | alpha | dev accuracy | test accuracy |")
    print("|---|---|---|---|")
    for pair in args.sweep:
        temperature, alpha = pair.split(":")
        out, _ = distilled(args, teacher, train, extra, f"sweep-t{temperature}-a{alpha}", temperature, alpha)
        print(f"| {temperature} | {alpha} | {accuracy(out, 'dev'):.4f} | {accuracy(out, 'test'):.4f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="/tmp/ernie_ft-bench-distill")
    parser.add_argument("--teacher", help="a trained classification run to use as the teacher (default: train one)")
    parser.add_argument("--teacher-epochs", type=int, default=1)
    parser.add_argument("--student-epochs", type=int, default=1)
    parser.add_argument("--labelled", type=int, help="labelled training reviews for the students (default: all)")
    parser.add_argument("--unlabelled-rest", action="store_true", help="the other reviews' texts as --unlabelled")
    parser.add_argument("--temperature", default="2")
    parser.add_argument("--alpha", default="0.5")
    parser.add_argument("--skip", nargs="*", default=[], choices=["labels", "distilled"], help="runs to leave out")
    parser.add_argument("--sweep", nargs="+", metavar="T:ALPHA", help="only distilled students, one per pair")
    parser.add_argument(
        "--transfer",
        nargs="+",
        choices=["logits", "hidden", "hidden+attention"],
        help="only distilled students, one per mode of distill --transfer",
    )
    parser.add_argument("--transfer-weight", default="1", help="distill --transfer-weight with --transfer")
    args = parser.parse_args()
    print(cpu_line(), flush=True)  # the CPU every row names
    if (args.sweep or args.transfer) and not args.teacher:
        parser.error("--sweep and --transfer need --teacher RUN")
    os.makedirs(args.out, exist_ok=True)
    train, extra = os.path.join(DATA, "train.tsv"), []
    if args.labelled:
        train, unlabelled = split_train(args.out, args.labelled)
        extra = ["--unlabelled", unlabelled] if args.unlabelled_rest else []
    teacher = args.teacher or os.path.join(args.out, "teacher")
    (transfers if args.transfer else sweep if args.sweep else compare)(args, teacher, train, extra)


if __name__ == "__main__":
    main()

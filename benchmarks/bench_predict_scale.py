"""How ``predict``'s cost grows with its input: documents/s and peak memory for 10^4, 10^5 and 10^6 lines of short
reviews (docs/benchmarks.md, *How cost grows with the input*; docs/deployment.md, *Prediction over large files*).

    .venv/bin/python benchmarks/bench_predict_scale.py --lines 10000 100000
    nice -n 5 .venv/bin/python benchmarks/bench_predict_scale.py --lines 1000000 > /tmp/scale_1e6.log 2>&1 &
    .venv/bin/python benchmarks/bench_predict_scale.py --lines 100000 --nproc 2     # once predict has --nproc

The model is a scratch:tiny classifier trained for one epoch on data/sentiment_train.tsv and exported with
``export --format onnx --quantize int8`` (both in --work, made once; ``--engine dygraph`` runs the checkpoint
itself). The input is ChnSentiCorp's 12,000 reviews (../shared/data, else data/sentiment_train.tsv) drawn at
random with a fixed seed, one a line. Each run is ``python -m ernie_ft predict`` in its own process group, its
peak memory read two ways: the largest process's peak resident set (``RUSAGE_CHILDREN``, from a fresh process
around it) and the whole process tree's resident memory summed every 0.2 s from /proc (what several engine
processes hold together). predict's own lines (its progress every 30 s) go to --work/predict_LINES_*.log, so a
run stopped early still shows the rate it held.

``--nproc N`` runs, for each size, ``predict --nproc N`` (which splits the machine's threads between its
processes) beside one process with all of them (the same total). ``--previous DIR``: a checkout (e.g. a git
worktree of an older commit) whose ernie_ft runs with this venv, its rows skipped above
``--skip-previous-above`` lines. ``--checkout DIR`` runs another checkout's ernie_ft as "this" (e.g. ``git
archive HEAD | tar -x -C DIR``: the last commit, while the working tree is being edited). No baseline of
../shared/bench predicts from a file (``baseline_optimum_int8.py`` times a fixed list of texts in a torch venv),
so the table is the growth alone.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import cpu

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data" / "chnsenticorp"
MEASURE = (
    "import resource, subprocess, sys, time; start = time.perf_counter(); "
    "status = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=open(sys.argv[1], 'w')).returncode; "
    "print(status, time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)
"""Run the command given after the log path; print its status, seconds and the largest child's peak RSS (KB)."""


def model(work: Path, checkout: Path, engine: str) -> Path:
    """The scratch:tiny classifier, trained once into ``work`` by ``checkout`` (the earlier one: later versions read
    its checkpoints, not always the other way round), and its int8 ONNX export unless ``engine`` is dygraph."""
    out = work / "model"
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    if not (out / "best").is_dir():
        train = ["--train", str(ROOT / "data" / "sentiment_train.tsv"), "--model", "scratch:tiny", "--epochs", "1"]
        command = [sys.executable, "-m", "ernie_ft.classify", *train, "--output", str(out), "--device", "cpu"]
        subprocess.run(command, check=True, cwd=checkout, env=env, stdout=subprocess.DEVNULL)
    if engine == "dygraph":
        return out
    exported = work / "int8"
    if not (exported / "model.int8.onnx").is_file():
        command = [sys.executable, "-m", "ernie_ft", "export", "--model", str(out), "--output", str(exported)]
        command += ["--format", "onnx", "--quantize", "int8", "--overwrite"]
        subprocess.run(command, check=True, cwd=checkout, env=env, stdout=subprocess.DEVNULL)
    return exported


def reviews() -> tuple[str, list[str]]:
    """(their source's name, the reviews): ChnSentiCorp's (train, dev and test) when ../shared/data has them, else
    data/'s sample reviews (shorter: 29 characters against 108 on average)."""
    files = [SHARED / f"{split}.tsv" for split in ("train", "dev", "test")]
    name = "chnsenticorp"
    if not all(path.is_file() for path in files):
        files, name = [ROOT / "data" / "sentiment_train.tsv"], "sample"
    texts = []
    for path in files:
        for row in path.read_text("utf-8").split("\n")[1:]:
            text = row.split("\t", 1)[-1].replace("\r", "").strip()
            if text:
                texts.append(text)
    return name, texts


def input_file(work: Path, lines: int) -> Path:
    """``lines`` reviews drawn at random (seed 0), one a line; named by their source, so that a file drawn from
    another source (a checkout without ../shared) is never taken for this one."""
    name, texts = reviews()
    path = work / f"{name}_{lines}.txt"
    if not path.exists():
        draw = random.Random(0)
        with open(path, "w", encoding="utf-8") as f:
            for _ in range(lines):
                f.write(texts[draw.randrange(len(texts))] + "\n")
    return path


def rss_kb(pid: int) -> int:
    """Resident memory (KB) of one process; 0 once it has ended."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
    except OSError:
        return 0


def tree_rss_kb(pid: int) -> int:
    """Resident memory (KB) of every process under ``pid`` (not ``pid`` itself), summed."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        if current != pid:
            total += rss_kb(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children", encoding="ascii") as f:
                    pending.extend(int(child) for child in f.read().split())
        except (OSError, ValueError):
            continue
    return total


def run(checkout: Path, model_dir: Path, source: Path, work: Path, name: str, extra: list[str]) -> dict:
    """Seconds, documents/s and peak memory (MB: the largest process's, the process tree's) of one predict."""
    output, log = work / "out.jsonl", work / f"predict_{name}.log"
    args = ["--model", str(model_dir), "--input", str(source), "--output", str(output), "--device", "cpu", *extra]
    predict = [sys.executable, "-m", "ernie_ft", "predict", *args]
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    measured = [sys.executable, "-c", MEASURE, str(log), *predict]  # the checkout as cwd: python -m imports from it
    process = subprocess.Popen(measured, stdout=subprocess.PIPE, text=True, env=env, cwd=checkout)
    tree_peak = 0
    while process.poll() is None:
        tree_peak = max(tree_peak, tree_rss_kb(process.pid))
        time.sleep(0.2)
    status, seconds, peak = process.stdout.read().split()
    if status != "0":
        raise SystemExit(f"predict failed with {checkout} (status {status}): {log.read_text('utf-8')[-2000:]}")
    lines = sum(1 for _ in open(output, encoding="utf-8"))
    command = " ".join(["python -m ernie_ft predict", *args]).replace(str(work) + "/", "")
    return {
        "seconds": float(seconds),
        "docs_per_s": lines / float(seconds),
        "peak_mb": int(peak) / 1024,
        "tree_peak_mb": tree_peak / 1024,
        "command": command,
    }


def configurations(args: argparse.Namespace) -> list[tuple[str, Path, list[str]]]:
    """(name, checkout, extra predict flags) per row of one size: this version, --nproc's pair, the previous one."""
    rows = [("this", args.checkout, ["--engine", args.engine])]
    if args.nproc > 1:
        threads = os.cpu_count()
        rows = [
            (f"this, 1 process x {threads} threads", args.checkout, ["--engine", args.engine]),
            (f"this, --nproc {args.nproc}", args.checkout, ["--engine", args.engine, "--nproc", str(args.nproc)]),
        ]
    if args.previous is not None:
        rows.append(("previous", args.previous, ["--engine", args.engine]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--engine", default="onnxruntime-int8", choices=["onnxruntime-int8", "dygraph"])
    parser.add_argument("--nproc", type=int, default=1, help="also run predict --nproc N beside one process")
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the checkout of 'this' rows (default: this one)")
    parser.add_argument("--previous", type=Path, help="an earlier checkout to run the same way")
    parser.add_argument("--skip-previous-above", type=int, default=100_000, help="line counts the previous one skips")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_predict_scale"))
    args = parser.parse_args()
    print(cpu.line(), flush=True)
    args.work.mkdir(parents=True, exist_ok=True)
    model_dir = model(args.work, args.previous or args.checkout, args.engine)
    rows = []
    for lines in args.lines:
        source = input_file(args.work, lines)
        for name, checkout, extra in configurations(args):
            if name == "previous" and lines > args.skip_previous_above:
                continue
            tag = f"{lines}_{len(rows)}"
            result = {"lines": lines, "version": name, **run(checkout, model_dir, source, args.work, tag, extra)}
            rows.append(result)
            print(json.dumps(result, ensure_ascii=False), flush=True)
    print("\n| lines | version | seconds | documents/s | peak memory (MB): largest process / all processes |")
    print("|---|---|---|---|---|")
    for r in rows:
        memory = f"{r['peak_mb']:,.0f} / {r['tree_peak_mb']:,.0f}"
        print(f"| {r['lines']:,} | {r['version']} | {r['seconds']:,.0f} | {r['docs_per_s']:,.0f} | {memory} |")
    print(f"\ncommand ({args.engine}): {rows[0]['command']}" if rows else "")


if __name__ == "__main__":
    main()

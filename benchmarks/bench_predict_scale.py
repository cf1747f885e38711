"""How ``predict``'s cost grows with its input: documents/s and peak memory for 10^4, 10^5 (and 10^6) lines of
short reviews, this checkout against an earlier one run the same way (docs/deployment.md, *Prediction over large
files*).

    .venv/bin/python benchmarks/bench_predict_scale.py --previous /tmp/wt-head --lines 10000 100000

The model is a scratch:tiny classifier trained for one epoch on data/sentiment_train.tsv (in --work, by the
previous checkout when one is given); each run is
``python -m ernie_ft predict --engine dygraph --device cpu`` in its own process, its peak resident memory read by
a fresh process around it (``RUSAGE_CHILDREN``). ``--previous DIR``: a checkout (e.g. a git worktree of an older
commit) whose ernie_ft runs with this venv; its rows are skipped for line counts in ``--skip-previous-above``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import cpu

ROOT = Path(__file__).resolve().parent.parent
MEASURE = (
    "import resource, subprocess, sys, time; start = time.perf_counter(); "
    "status = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode; "
    "print(status, time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def model(work: Path, checkout: Path) -> Path:
    """The scratch:tiny classifier, trained once into ``work`` by ``checkout`` (the earlier one: later versions read
    its checkpoints, not always the other way round)."""
    out = work / "model"
    if not (out / "best").is_dir():
        train = ["--train", str(ROOT / "data" / "sentiment_train.tsv"), "--model", "scratch:tiny", "--epochs", "1"]
        command = [sys.executable, "-m", "ernie_ft.classify", *train, "--output", str(out), "--device", "cpu"]
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        subprocess.run(command, check=True, cwd=checkout, env=env, stdout=subprocess.DEVNULL)
    return out


def input_file(work: Path, lines: int) -> Path:
    """``lines`` reviews of data/, repeated, one a line."""
    path = work / f"reviews_{lines}.txt"
    if not path.exists():
        rows = (ROOT / "data" / "sentiment_train.tsv").read_text("utf-8").split("\n")[1:]
        texts = [row.split("\t")[1] for row in rows if row.strip()]
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(f"{texts[i % len(texts)]}\n" for i in range(lines))
    return path


def run(checkout: Path, model_dir: Path, source: Path, output: Path) -> dict:
    """Seconds, documents/s and peak memory (MB) of one predict, with ``checkout``'s ernie_ft."""
    args = ["--model", str(model_dir), "--input", str(source), "--output", str(output)]
    predict = [sys.executable, "-m", "ernie_ft", "predict", *args, "--engine", "dygraph", "--device", "cpu"]
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    measured = [sys.executable, "-c", MEASURE, *predict]  # from the checkout: python -m imports from the cwd first
    done = subprocess.run(measured, capture_output=True, text=True, env=env, cwd=checkout)
    status, seconds, peak = done.stdout.split()
    if status != "0":
        raise SystemExit(f"predict failed with {checkout}: {done.stderr[-2000:]}")
    lines = sum(1 for _ in open(output, encoding="utf-8"))
    return {"seconds": float(seconds), "docs_per_s": lines / float(seconds), "peak_mb": int(peak) / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--previous", type=Path, help="an earlier checkout to run the same way")
    parser.add_argument("--skip-previous-above", type=int, default=100_000, help="line counts the previous one skips")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_predict_scale"))
    args = parser.parse_args()
    print(cpu.line(), flush=True)
    args.work.mkdir(parents=True, exist_ok=True)
    model_dir = model(args.work, args.previous or ROOT)
    rows = []
    for lines in args.lines:
        source = input_file(args.work, lines)
        versions = [("this", ROOT)]
        if args.previous is not None and lines <= args.skip_previous_above:
            versions.append(("previous", args.previous))
        for name, checkout in versions:
            result = {"lines": lines, "version": name, **run(checkout, model_dir, source, args.work / "out.jsonl")}
            rows.append(result)
            print(json.dumps(result), flush=True)
    print("\n| lines | version | seconds | documents/s | peak memory (MB) |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['lines']:,} | {r['version']} | {r['seconds']:.0f} | {r['docs_per_s']:.0f} | {r['peak_mb']:.0f} |")


if __name__ == "__main__":
    main()

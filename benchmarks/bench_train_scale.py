"""How training's data step grows with the file: time and peak memory of reading, checking and featurizing a
classification TSV of 10^5 and 10^6 rows (docs/benchmarks.md, *How cost grows with the input*).

    .venv/bin/python benchmarks/bench_train_scale.py --rows 100000 1000000
    .venv/bin/python benchmarks/bench_train_scale.py --rows 100000 --tracemalloc     # where the peak is held

Each size runs in a fresh process what ``python -m ernie_ft classify --train FILE --model scratch:tiny`` does
before its first step (``training.run.setup``'s data part): the splits read and checked (``read_splits``), the
text pipeline (the ERNIE 3.0 vocabulary of ../shared/data when there, else one built from the texts), and the
features (``featurize``: tokenisation through the Arrow cache, windows, labels), twice: with an empty
tokenisation cache, then with the cache the first pass wrote. After each phase the process's resident memory
and its peak during the phase (VmHWM, reset between phases through /proc/self/clear_refs) are printed, and the
features' own size (their ints and lists, ``sys.getsizeof``) to tell what the features need from what is held
beside them. ``--checkout DIR`` runs another checkout's ernie_ft (e.g. ``git archive COMMIT | tar -x -C DIR``:
the version before a change). The rows are ChnSentiCorp's 12,000 labelled reviews drawn at random (seed 0).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import cpu

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"


def labelled_reviews() -> list[tuple[str, str]]:
    """(label, text) of ChnSentiCorp when ../shared/data has it, else of data/sentiment_train.tsv."""
    files = [SHARED / "chnsenticorp" / f"{split}.tsv" for split in ("train", "dev", "test")]
    if not all(path.is_file() for path in files):
        files = [ROOT / "data" / "sentiment_train.tsv"]
    rows = []
    for path in files:
        for row in path.read_text("utf-8").split("\n")[1:]:
            label, _, text = row.replace("\r", "").partition("\t")
            if text.strip():
                rows.append((label, text.strip()))
    return rows


def train_file(work: Path, rows: int) -> Path:
    """A TSV (header ``label<TAB>text_a``) of ``rows`` reviews drawn at random (seed 0)."""
    path = work / f"train_{rows}.tsv"
    if not path.exists():
        reviews, draw = labelled_reviews(), random.Random(0)
        with open(path, "w", encoding="utf-8") as f:
            f.write("label\ttext_a\n")
            for _ in range(rows):
                label, text = reviews[draw.randrange(len(reviews))]
                f.write(f"{label}\t{text}\n")
    return path


def memory_kb() -> tuple[int, int]:
    """(resident, peak resident since the last reset) of this process, in KB."""
    with open("/proc/self/status", encoding="ascii") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def reset_peak() -> None:
    """Start VmHWM again from the current resident memory (Linux: ``5`` to clear_refs)."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")


def features_mb(features) -> float:
    """What the features themselves take: each dict, its lists and their distinct ints, in MB."""
    seen, total = set(), 0
    for feature in features:
        total += sys.getsizeof(feature)
        for value in feature.values():
            total += sys.getsizeof(value)
            for item in value if isinstance(value, list) else ():
                if id(item) not in seen:  # small ints are shared
                    seen.add(id(item))
                    total += sys.getsizeof(item)
    return total / 2**20


def child(path: str, cache: str, trace: bool) -> None:
    """Run the data step of ``setup`` on ``path`` and print one JSON line per phase."""
    if trace:
        import tracemalloc

        tracemalloc.start(8)
    from ernie_ft.cli.train import parse_train_args
    from ernie_ft.data.dataset import featurize, read_splits
    from ernie_ft.models import modeling
    from ernie_ft.task import load_task

    argv = ["--train", path, "--model", "scratch:tiny", "--cache-dir", cache, "--output", cache + "-out"]
    vocab = SHARED / "ernie-3.0-vocab" / "vocab.txt"
    argv += ["--vocab", str(vocab)] if vocab.is_file() else []
    cfg = parse_train_args(argv, "classify", "", None)
    task = load_task("classify")
    phases, start = [], time.perf_counter()

    def phase(name: str, **extra) -> None:
        nonlocal start
        rss, peak = memory_kb()
        took = time.perf_counter() - start
        phases.append({"phase": name, "seconds": round(took, 2), "rss_mb": rss // 1024, "peak_mb": peak // 1024})
        phases[-1].update(extra)
        print(json.dumps(phases[-1]), flush=True)
        reset_peak()
        start = time.perf_counter()

    phase("imports")
    examples, labels = read_splits(task, cfg.data)
    phase("read", examples=sum(len(ex) for ex in examples.values()))
    pipeline = modeling.load_pipeline(cfg.model, cfg.data, lambda: task.texts(examples["train"]), task.exact_spans)
    phase("pipeline")
    for cached in (False, True):
        if trace:
            tracemalloc.reset_peak()
        splits = {name: featurize(task, name, ex, pipeline, labels, cfg.data) for name, ex in examples.items()}
        features = [f for split in splits.values() for f in split.features]
        phase("featurize, cache " + ("read" if cached else "written"), features_mb=round(features_mb(features)))
        if trace:
            snapshot = tracemalloc.take_snapshot()
            print(f"tracemalloc peak {tracemalloc.get_traced_memory()[1] / 2**20:.0f} MB; held now:", flush=True)
            for stat in snapshot.statistics("lineno")[:8]:
                print(f"  {stat.size / 2**20:8.1f} MB  {stat.traceback}", flush=True)
        del splits, features


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_train_scale"))
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the checkout whose ernie_ft runs (default: this)")
    parser.add_argument("--tracemalloc", action="store_true", help="also print where the memory is allocated")
    parser.add_argument("--child", nargs=2, metavar=("FILE", "CACHE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(*args.child, args.tracemalloc)
    print(cpu.line(), flush=True)
    args.work.mkdir(parents=True, exist_ok=True)
    table = []
    for rows in args.rows:
        source, cache = train_file(args.work, rows), args.work / f"cache_{rows}_{os.getpid()}"
        shutil.rmtree(cache, ignore_errors=True)
        command = [sys.executable, __file__, "--child", str(source), str(cache)]
        command += ["--tracemalloc"] if args.tracemalloc else []
        started = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": str(args.checkout)}
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode:
            raise SystemExit(f"the data step failed on {rows} rows: {done.stderr[-3000:]}")
        print(f"{rows:,} rows ({time.perf_counter() - started:.0f} s in all):\n{done.stdout}", flush=True)
        for line in done.stdout.splitlines():
            if line.startswith("{"):
                table.append({"rows": rows, **json.loads(line)})
    print("| rows | phase | seconds | resident after (MB) | peak in the phase (MB) | the features alone (MB) |")
    print("|---|---|---|---|---|---|")
    for r in table:
        if r["phase"] != "imports":
            size, memory = r.get("features_mb", ""), f"{r['rss_mb']:,} | {r['peak_mb']:,}"
            print(f"| {r['rows']:,} | {r['phase']} | {r['seconds']:.1f} | {memory} | {size} |")


if __name__ == "__main__":
    main()

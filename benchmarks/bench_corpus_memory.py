"""Peak memory of pretraining against corpus size: the block cache is written chunk by chunk and read
memory-mapped, so a corpus larger than RAM must not raise the peak.

    python benchmarks/bench_corpus_memory.py [--copies 1 5] [--steps 20] [--num-proc 2] [--threads 2]

For each entry of ``--copies``, a corpus of that many copies of ``../shared/data/corpus`` (43 MiB of text
each; the copies are files under a temporary directory, never in the repository) is
pretrained from scratch (``scratch:tiny``, ERNIE 3.0 vocabulary, max length 128) for ``--steps`` steps
with a fresh cache directory, so the run reads, checks, tokenises and packs every byte. A sampler adds
up the RSS of the process and its tokenising workers every 0.1 s. Prints one table row per corpus:
text size, tokens and blocks, wall time, peak RSS of the whole process tree and of the main process, the
main process's peak private memory (RSS less file-backed pages such as the memory-mapped cache's, which
the kernel can drop), and the size of the block cache on disk.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import psutil
from cpu import line as cpu_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("ERNIE_FT_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))


def make_corpus(directory: str, copies: int) -> tuple[list[str], int]:
    """``copies`` copies of the shared corpus files under ``directory``; (files, total bytes)."""
    files = []
    for k in range(copies):
        for source in sorted(glob.glob(os.path.join(SHARED, "corpus", "*.txt"))):
            files.append(shutil.copyfile(source, os.path.join(directory, f"copy{k}-{os.path.basename(source)}")))
    return files, sum(os.path.getsize(f) for f in files)


def tree_rss(process: psutil.Process) -> tuple[int, int, int]:
    """(RSS of the process and its children, RSS of the process, the process's RSS less its file-backed and
    shared pages) in bytes. The last is its own heap: pages of the memory-mapped cache count in RSS while
    they are resident, but the kernel drops them under memory pressure."""
    total = own = private = 0
    try:
        info = process.memory_info()
        own, private = info.rss, info.rss - info.shared
        total = own + sum(child.memory_info().rss for child in process.children(recursive=True))
    except psutil.Error:  # a worker (or the run) ended between the two calls
        pass
    return total, own, private


def measure(files: list[str], args, work: str) -> dict:
    cache, out = os.path.join(work, "cache"), os.path.join(work, "run")
    command = [
        sys.executable,
        "-m",
        "ernie_ft.pretrain",
        "--corpus",
        *files,
        "--model",
        "scratch:tiny",
        "--vocab",
        os.path.join(SHARED, "ernie-3.0-vocab", "vocab.txt"),
        "--max-len",
        "128",
        "--batch-size",
        "32",
        "--stop-after-steps",
        str(args.steps),
        "--eval-steps",
        "1000000",
        "--num-proc",
        str(args.num_proc),
        "--threads",
        str(args.threads),
        "--cache-dir",
        cache,
        "--output",
        out,
        "--overwrite",
    ]
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    process, peak, done = psutil.Process(proc.pid), [0, 0, 0], threading.Event()

    def sample():
        while not done.wait(0.1):
            peak[:] = map(max, peak, tree_rss(process))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output = proc.communicate()[0]
    done.set()
    sampler.join()
    if proc.returncode != 0:
        sys.exit(f"pretraining failed ({proc.returncode}):\n{output[-3000:]}")
    found = re.search(r"--corpus \(train\): .*?([\d,]+) tokens -> (\d+) blocks", output)
    return {
        "seconds": time.monotonic() - start,
        "peak": peak[0],
        "peak_main": peak[1],
        "peak_private": peak[2],
        "tokens": found.group(1) if found else "?",
        "blocks": found.group(2) if found else "?",
        "cache": sum(
            os.path.getsize(f) for f in glob.glob(os.path.join(cache, "**", "*"), recursive=True) if os.path.isfile(f)
        ),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--copies", type=int, nargs="+", default=[1, 5])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--num-proc", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    print(cpu_line(), flush=True)  # the CPU every row names
    print(
        f"machine: {psutil.virtual_memory().total / 2**30:.1f} GiB RAM, {os.cpu_count()} cores; "
        f"{args.steps} steps of 32 x 128 after reading, --num-proc {args.num_proc}\n"
    )
    print(
        "| corpus | text MiB | tokens | blocks | wall s | peak RSS MiB (all processes) | peak RSS MiB (main) | "
        "peak private MiB (main) | block cache MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for copies in args.copies:
        with tempfile.TemporaryDirectory() as work:
            files, size = make_corpus(work, copies)
            r = measure(files, args, work)
        mib = {key: f"{r[key] / 2**20:,.0f}" for key in ("peak", "peak_main", "peak_private", "cache")}
        print(
            f"| {copies} x ../shared/data/corpus | {size / 2**20:.0f} | {r['tokens']} | {r['blocks']} | "
            f"{r['seconds']:.0f} | {mib['peak']} | {mib['peak_main']} | {mib['peak_private']} | {mib['cache']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Paddle's fp32 GEMM rate with and without ``MKL_DEBUG_CPU_TYPE=5``, side by side with PyTorch's, on this CPU.

    python benchmarks/bench_gemm.py [--threads 2] [--size 2048] [--rounds 3] [--torch-python PATH]

Each round runs ``../shared/bench/peak_flops.py`` (the best of repeated square fp32 matmuls, 2 n^3 FLOPs each) in a
fresh interpreter three times: Paddle with the variable unset, Paddle with it set to 5, and PyTorch (in the
``--torch-python`` interpreter, if given). The variable must be in the environment before Paddle's MKL loads, hence
the fresh processes. The table gives each round's GFLOP/s and the median, and what ernie_ft's command line sets on
this CPU (``ernie_ft.training.mkl``: the switch on AMD only). docs/benchmarks.md, *The MKL switch*, has the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from cpu import line as cpu_line

from ernie_ft.training import mkl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.environ.get("ERNIE_FT_SHARED_BENCH", os.path.join(ROOT, "..", "shared", "bench"))


def gflops(python: str, backend: str, args, switch: str | None) -> float:
    """The best GFLOP/s of ``backend`` in a fresh ``python`` with MKL_DEBUG_CPU_TYPE ``switch`` (None: unset)."""
    environ = {k: v for k, v in os.environ.items() if k != mkl.VARIABLE}
    if switch is not None:
        environ[mkl.VARIABLE] = switch
    command = [python, os.path.join(BENCH, "peak_flops.py"), "--threads", str(args.threads), "--sizes",
               str(args.size), "--seconds", str(args.seconds), "--backends", backend]  # fmt: skip
    out = subprocess.run(command, env=environ, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["gflops"][backend][str(args.size)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--size", type=int, default=2048)
    p.add_argument("--seconds", type=float, default=3.0, help="time budget of each measurement")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--torch-python", help="python of a venv with torch (see ../shared/bench/README.md)")
    args = p.parse_args()
    print(cpu_line(), flush=True)
    stacks = {"paddle, unset": (sys.executable, "paddle", None), "paddle, =5": (sys.executable, "paddle", mkl.AVX2)}
    if args.torch_python:
        stacks["torch"] = (args.torch_python, "torch", None)
    rounds = {name: [] for name in stacks}
    for _ in range(args.rounds):
        for name, (python, backend, switch) in stacks.items():
            rounds[name].append(gflops(python, backend, args, switch))
    environ: dict = {}
    chosen = "=5" if mkl.use_avx2_on_amd(environ) else "unset"
    print(f"\n{args.size} x {args.size} fp32 matmul, {args.threads} threads, GFLOP/s (rounds; median)")
    for name, values in rounds.items():
        print(f"| {name} | {', '.join(f'{v:.0f}' for v in values)} | {statistics.median(values):.0f} |")
    print(f"ernie_ft's command line on this CPU ({mkl.cpu_vendor()}): MKL_DEBUG_CPU_TYPE {chosen}")


if __name__ == "__main__":
    main()

"""Step time and memory per rank of ernie_ft's parallel modes, side by side with one process.

    python benchmarks/bench_parallel.py [--shape nano] [--steps 20] [--warmup 3]

Runs the same synthetic batches as ``../shared/bench`` (its ``common.make_batches``: the
review-corpus length distribution, global batch 32, max length 128, length grouping,
dynamic padding, dropout 0.1, fp32) through ernie_ft's own pieces (``parallel.Parallel``,
``trainer.forward``, ``trainer.build_optimizer``) in these modes, all at the same global
batch:

- 1 process with 2 math threads, and with 1 thread
- 2 data-parallel processes (``--nproc 2``), 1 thread each, 16 sequences per rank
- 2 tensor-parallel processes (``--tensor-parallel 2``), 1 thread each, the whole batch

and prints one table: median step time, its ratio to one process with 2 threads, and per rank
the parameters and optimizer state held (local shards, MiB) and peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from cpu import line as cpu_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.environ.get("ERNIE_FT_SHARED_BENCH", os.path.join(ROOT, "..", "shared", "bench"))
MODES = {  # name -> (processes, threads per process, tensor-parallel degree)
    "1 process x 2 threads": (1, 2, 1),
    "1 process x 1 thread": (1, 1, 1),
    "2 data-parallel x 1 thread": (2, 1, 1),
    "2 tensor-parallel x 1 thread": (2, 1, 2),
}


def bench_args(shape: str, steps: int, warmup: int):
    sys.path.insert(0, BENCH)
    import common

    sys.argv = [
        "bench",
        "--shape",
        shape,
        "--steps",
        str(steps),
        "--warmup",
        str(warmup),
        "--pad",
        "dynamic",
        "--group-by-length",
    ]
    return common, common.parse_args("ernie_ft")


def local_mib(tensors) -> float:
    total = 0
    for t in tensors:
        local = t._local_value() if t.is_dist() else t
        total += int(local.numel()) * local.element_size()
    return total / 2**20


def worker(shape: str, steps: int, warmup: int, tensor_parallel: int, threads: int, out: str) -> None:
    import numpy as np
    import paddle
    from paddlenlp.transformers import ErnieConfig, ErnieForSequenceClassification

    from ernie_ft.config import TrainConfig
    from ernie_ft.models.modeling import forward
    from ernie_ft.training import runtime
    from ernie_ft.training.parallel import Parallel
    from ernie_ft.training.run import build_optimizer

    common, args = bench_args(shape, steps, warmup)
    parallel = Parallel(tensor_parallel)
    runtime.set_threads(threads)
    paddle.seed(args.seed)
    config = ErnieConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=args.intermediate,
        max_position_embeddings=common.MAX_POSITIONS,
        type_vocab_size=common.TYPE_VOCAB,
        use_task_id=False,
        num_labels=common.NUM_LABELS,
        hidden_dropout_prob=args.dropout,
        attention_probs_dropout_prob=args.dropout,
    )
    model, optimizer = parallel.prepare(
        ErnieForSequenceClassification(config),
        lambda net: build_optimizer(net, TrainConfig(lr=args.lr, max_grad_norm=0), args.lr),
    )
    net = parallel.unwrap(model)
    times = []
    for i, batch in enumerate(common.make_batches(args)):
        rows = slice(None)
        if parallel.data_rank is not None and parallel.size > 1:  # data parallel: this rank's slice of the global batch
            share = len(batch["labels"]) // parallel.size
            rows = slice(parallel.rank * share, (parallel.rank + 1) * share)
        ids = batch["input_ids"][rows]
        tensors = parallel.distribute(
            {
                "input_ids": paddle.to_tensor(ids),
                "token_type_ids": paddle.to_tensor(np.zeros_like(ids)),
                "labels": paddle.to_tensor(batch["labels"][rows]),
            }
        )
        parallel.barrier()
        tic = time.perf_counter()
        loss = paddle.nn.functional.cross_entropy(forward(model, tensors), tensors["labels"])
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        float(loss)
        if i >= warmup:
            times.append(time.perf_counter() - tic)
    state = [v for v in optimizer.state_dict().values() if isinstance(v, paddle.Tensor)]
    record = {
        "rank": parallel.rank,
        "step_ms": 1000 * float(np.median(times)),
        "params_mib": local_mib(net.parameters()),
        "optimizer_mib": local_mib(state),
        "peak_rss_mib": common.peak_rss_mib(),
    }
    with open(f"{out}.{parallel.rank}", "w") as f:
        json.dump(record, f)


def run_mode(name: str, shape: str, steps: int, warmup: int, tmp: str) -> list[dict]:
    processes, threads, tp = MODES[name]
    out = os.path.join(tmp, name.replace(" ", "_"))
    command = [
        __file__,
        "--worker",
        "--shape",
        shape,
        "--steps",
        str(steps),
        "--warmup",
        str(warmup),
        "--tensor-parallel",
        str(tp),
        "--threads",
        str(threads),
        "--out",
        out,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    if processes > 1:
        command = [
            sys.executable,
            "-m",
            "paddle.distributed.launch",
            "--log_dir",
            out + "-logs",
            "--nproc_per_node",
            str(processes),
            *command,
        ]
    else:
        command = [sys.executable, *command]
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return [json.load(open(f"{out}.{r}")) for r in range(processes)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="nano")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tensor-parallel", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args.shape, args.steps, args.warmup, args.tensor_parallel, args.threads, args.out)
    print(cpu_line(), flush=True)  # the CPU every row names
    with tempfile.TemporaryDirectory() as tmp:
        results = {name: run_mode(name, args.shape, args.steps, args.warmup, tmp) for name in MODES}
    base = results["1 process x 2 threads"][0]["step_ms"]
    print(
        f"shape {args.shape}, global batch 32, max length 128, fp32, dropout 0.1; "
        f"{args.steps} timed steps after {args.warmup}; {os.cpu_count()} cores\n"
    )
    print(
        "| mode | step time (ms, slowest rank) | speed vs 1 process x 2 threads | params / rank (MiB) | "
        "optimizer state / rank (MiB) | peak RSS / rank (MiB) |"
    )
    print("|---|---|---|---|---|---|")
    for name, ranks in results.items():
        step = max(r["step_ms"] for r in ranks)
        print(
            f"| {name} | {step:.0f} | {base / step:.2f}x | {max(r['params_mib'] for r in ranks):.1f} | "
            f"{max(r['optimizer_mib'] for r in ranks):.1f} | {max(r['peak_rss_mib'] for r in ranks):.0f} |"
        )


if __name__ == "__main__":
    main()

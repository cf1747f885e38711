"""Time or profile one training step of ERNIE on the shared benchmark batches, without the CLI, and PyTorch's.

    python benchmarks/profile_step.py [--shape nano|medium] [--steps 11] [--profile | --ops] [--threads 2] \
        [--no-kernels] [--strided-views] [--dropout 0.1] [--torch-python PATH]

The model is the ``ErnieForSequenceClassification`` ernie_ft's command line trains (PaddleNLP's, its last layer
computed for [CLS] only: ``ernie_ft.models.first_token``) of the benchmark's shape (random init), trained with
AdamW on ``../shared/bench/common.make_batches`` (dynamic padding, length grouping), 2 math threads. By default it
runs as ernie_ft's trainer does on CPU: the layers of ``ernie_ft.models.kernels`` swapped in and Paddle's strided
views off; ``--no-kernels`` and ``--strided-views`` undo either. Prints real tokens/s over the timed steps and per
CPU-second of the process, or with ``--profile`` the per-operator table of ``paddle.profiler`` for 5 steps, or with
``--ops`` each fused kernel of ``ernie_ft/models/csrc`` against the Paddle ops it replaces. With ``--torch-python``
the same step follows in HF transformers / PyTorch as ``../shared/bench/baseline_hf_torch.py`` trains it (its
tokens/s, or ``torch.profiler``'s table with ``--profile``): the side-by-side of docs/benchmarks.md's Intel section.
This is how the changes in docs/benchmarks.md's training sections were found and measured one by one;
``benchmarks/bench_train.py`` is the side-by-side comparison through the command line.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from cpu import line as cpu_line
from cpu import paddle_environ

os.environ.update(paddle_environ(os.environ))  # before Paddle is imported
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.environ.get("ERNIE_FT_SHARED_BENCH", os.path.join(ROOT, "..", "shared", "bench"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="nano", choices=("nano", "medium"))
    p.add_argument("--steps", type=int, default=11, help="timed steps (after 3 untimed)")
    p.add_argument("--profile", action="store_true", help="print the profiler's operator table instead")
    p.add_argument("--no-kernels", action="store_true", help="keep Paddle's own layers")
    p.add_argument("--strided-views", action="store_true", help="leave FLAGS_use_stride_kernel on")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--threads", type=int, default=2, help="math threads")
    p.add_argument(
        "--torch-python",
        help="then the same step in HF transformers / PyTorch, run by this interpreter (a venv with both)",
    )
    p.add_argument("--torch-side", action="store_true", help=argparse.SUPPRESS)  # what --torch-python runs
    p.add_argument(
        "--ops",
        action="store_true",
        help="instead: time each fused kernel against the Paddle ops it replaces, forward + backward",
    )
    args = p.parse_args()
    sys.path[:0] = [BENCH, ROOT]
    import common

    sys.argv = ["bench", "--shape", args.shape, "--steps", str(max(args.steps, 5)), "--warmup", "3"]
    sys.argv += ["--pad", "dynamic", "--group-by-length", "--threads", str(args.threads)]
    bench = common.parse_args("profile_step")
    if args.torch_side:
        return torch_step(args, bench, common)
    print(cpu_line(), flush=True)  # the CPU every row names
    if args.ops:
        return time_ops(bench, args.dropout, args.shape)
    paddle_step(args, bench, common)
    if args.torch_python:
        command = [args.torch_python, os.path.abspath(__file__), "--torch-side", *_passed(args)]
        subprocess.run(command, env={**os.environ, "PYTHONPATH": ROOT}, check=True)


def _passed(args) -> list[str]:
    """The options the torch side takes from this run."""
    flags = ["--shape", args.shape, "--steps", str(args.steps), "--threads", str(args.threads)]
    return flags + ["--dropout", str(args.dropout)] + (["--profile"] if args.profile else [])


def _shape(bench, dropout: float) -> dict:
    """The config fields both models take under the same names: the benchmark's shape and dropout."""
    return {
        "vocab_size": bench.vocab,
        "hidden_size": bench.hidden,
        "num_hidden_layers": bench.layers,
        "num_attention_heads": bench.heads,
        "intermediate_size": bench.intermediate,
        "hidden_dropout_prob": dropout,
        "attention_probs_dropout_prob": dropout,
    }


def paddle_step(args, bench, common) -> None:
    """ernie_ft's step: time it, or profile it with paddle.profiler."""
    import paddle
    import paddle.nn.functional as F
    from paddlenlp.transformers import ErnieConfig

    from ernie_ft.models.fast_layers import enable_fast_kernels
    from ernie_ft.models.first_token import ErnieForSequenceClassification
    from ernie_ft.training import denormals, heap, runtime

    heap.retain_freed_memory()  # as the command line's process does (quiet.quiet_process)
    denormals.flush_denormals()
    runtime.set_threads(args.threads)
    paddle.set_flags({"FLAGS_use_stride_kernel": args.strided_views})
    paddle.seed(0)
    model = ErnieForSequenceClassification(
        ErnieConfig(
            **_shape(bench, args.dropout),
            max_position_embeddings=2048,
            type_vocab_size=4,
            num_classes=2,
            use_task_id=False,
        )
    )
    if not args.no_kernels:
        enable_fast_kernels(model)
    model.train()
    optimizer = paddle.optimizer.AdamW(1e-4, parameters=model.parameters(), weight_decay=0.01)
    batches = [{k: paddle.to_tensor(v) for k, v in b.items()} for b in common.make_batches(bench)]

    def step(batch):
        logits = model(input_ids=batch["input_ids"], token_type_ids=paddle.zeros_like(batch["input_ids"]))
        loss = F.cross_entropy(logits, batch["labels"])
        loss.backward()
        optimizer.step()
        optimizer.clear_grad(set_to_zero=False)  # as trainer.train_step
        return float(loss)

    if not args.profile:
        views = "on" if args.strided_views else "off"
        return timed(step, batches, args, f"kernels {'off' if args.no_kernels else 'on'}, strided views {views}")
    import paddle.profiler as profiler

    for batch in batches[:3]:
        step(batch)
    prof = profiler.Profiler(targets=[profiler.ProfilerTarget.CPU])
    prof.start()
    for batch in batches[3:8]:
        step(batch)
        prof.step()
    prof.stop()
    prof.summary(op_detail=False, thread_sep=False, time_unit="ms", sorted_by=profiler.SortedKeys.CPUTotal)


def torch_step(args, bench, common) -> None:
    """The same step in HF transformers / PyTorch, as ../shared/bench/baseline_hf_torch.py trains it
    (BertForSequenceClassification, torch.optim.AdamW's defaults): time it, or profile it with torch.profiler."""
    common.set_thread_env(args.threads)
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = BertConfig(
        **_shape(bench, args.dropout),
        max_position_embeddings=common.MAX_POSITIONS,
        type_vocab_size=common.TYPE_VOCAB,
        pad_token_id=common.PAD_ID,
        num_labels=common.NUM_LABELS,
    )
    model = BertForSequenceClassification(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    batches = [{k: torch.from_numpy(v) for k, v in b.items()} for b in common.make_batches(bench)]

    def step(batch):
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        loss = torch.nn.functional.cross_entropy(logits, batch["labels"])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    if not args.profile:
        return timed(step, batches, args, f"HF transformers / PyTorch {torch.__version__}")
    for batch in batches[:3]:
        step(batch)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for batch in batches[3:8]:
            step(batch)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))


def timed(step, batches, args, what: str) -> None:
    """Real tokens/s over the steps after 3 untimed ones, and per CPU-second of this process (at 1 thread, the
    figure a machine other processes load changes least)."""
    import numpy as np

    for batch in batches[:3]:
        step(batch)
    seconds, cpu, tokens = [], 0.0, 0
    for batch in batches[3:]:
        tic, cpu_tic = time.perf_counter(), time.process_time()
        step(batch)
        seconds.append(time.perf_counter() - tic)
        cpu += time.process_time() - cpu_tic
        tokens += int(batch["attention_mask"].sum())
    print(
        f"{args.shape}: {tokens / sum(seconds):.0f} real tokens/s, {tokens / cpu:.0f} per CPU-second, median step "
        f"{1000 * np.median(seconds):.0f} ms over {len(seconds)} steps, {args.threads} threads ({what})",
        flush=True,
    )


def time_ops(bench, p: float, shape: str) -> None:
    """Forward + backward of each fused kernel and of the Paddle ops it replaces, on the tensors of
    one benchmark batch of 32 x 112 tokens (the median padded length), median of 20 runs."""
    import ctypes

    import numpy as np
    import paddle
    import paddle.nn.functional as F

    from ernie_ft.models import kernels

    libc = ctypes.CDLL("libc.so.6")  # keep freed blocks in the heap, as they stay within a training
    libc.mallopt(-3, 1 << 30)  # step (M_MMAP_THRESHOLD); in a bare loop every 19 MB output would be
    libc.mallopt(-1, 1 << 30)  # a fresh mmap whose page faults cost more than the kernels (M_TRIM_THRESHOLD)

    def timed(fn, *shapes):
        inputs = [paddle.randn(s) for s in shapes]
        for t in inputs:
            t.stop_gradient = False
        seconds = []
        for _ in range(23):
            tic = time.perf_counter()
            y = fn(*inputs)
            y.backward(paddle.ones_like(y))
            seconds.append(time.perf_counter() - tic)
            for t in inputs:
                t.clear_gradient(set_to_zero=False)
        return 1000 * np.median(seconds[3:])

    tokens, scores = [32, 112, bench.hidden], [32, bench.heads, 112, 112]
    norm = paddle.nn.LayerNorm(bench.hidden)
    cases = {
        "softmax + dropout": (lambda x: F.dropout(F.softmax(x), p), lambda x: kernels.softmax_dropout(x, p), [scores]),
        "GELU (+ dropout 0, as ERNIE's FFN)": (
            F.gelu,
            lambda x: kernels.gelu_dropout(x, 0.0),
            [[32, 112, bench.intermediate]],
        ),
        "residual + dropout + LayerNorm": (
            lambda r, x: norm(r + F.dropout(x, p)),
            lambda r, x: kernels.add_dropout_layernorm(r, x, norm, p),
            [tokens, tokens],
        ),
    }
    print(f"{shape}, batch 32 x 112 tokens, dropout {p}, 2 threads: ms for forward + backward, median of 20\n")
    print("| op | Paddle's kernels | fused (ernie_ft) | ratio |")
    print("|---|---|---|---|")
    for name, (plain, fused, shapes) in cases.items():
        a, b = timed(plain, *shapes), timed(fused, *shapes)
        print(f"| {name} | {a:.1f} | {b:.1f} | {a / b:.1f}x |")


if __name__ == "__main__":
    main()

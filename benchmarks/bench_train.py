"""Training throughput of ernie_ft against HF transformers/PyTorch and plain PaddleNLP, side by side.

    python benchmarks/bench_train.py [--shape nano|medium] [--steps 20] [--warmup 3] [--threads 2] \
        [--rounds 1] [--torch-python PATH] [--baseline SOURCE] [--amp bf16]

The sequences are ``../shared/bench/common.make_batches``'s (the review-corpus length
distribution, batch 32, max length 128, vocab 40000, labels learnable from a bag of ids).
ernie_ft trains them through its command line (``python -m ernie_ft --task`` with the small
task below that reads the token ids instead of text: model, sampler, batching, trainer and
logging as a user gets them), fp32, dropout 0.1, AdamW at lr 1e-4 without clipping or warm-up,
--threads math threads; its real tokens/s per step come from ``train_log.jsonl``. In the same
invocation the two baselines run with their best settings (``--pad dynamic --group-by-length``,
``MKL_DEBUG_CPU_TYPE=5`` for Paddle on AMD CPUs only, as ernie_ft's command line sets it). The table gives real
tokens/s, median step time, peak resident memory and the ratios ernie_ft / HF-torch and ernie_ft / PaddleNLP. With
--rounds N the three run in turn N times: this machine's speed drifts by up to 20 % over minutes, so a
ratio is taken within each round and the table gives their median and every round's value. With
``--baseline SOURCE`` (another ernie_ft version's source tree, e.g. ``git worktree add /tmp/wt/base HEAD``) that
version trains the same batches in every round too, as the stack "ernie_ft (baseline)". With ``--amp bf16``
ernie_ft trains with ``--amp bf16`` against itself in fp32 and HF under bf16 autocast, as its Trainer's ``--bf16``
runs on CPU (``baselines/baseline_hf_torch_bf16.py``); PaddleNLP, which has no CPU bf16, is left out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.environ.get("ERNIE_FT_SHARED_BENCH", os.path.join(ROOT, "..", "shared", "bench"))


@dataclass
class TokenIds:
    """A classification task whose records are token ids: {"ids": [...], "label": "0"}."""

    name: str = "benchmarks/bench_train.py:TokenIds"
    head: str = "sequence"
    metric: str = "accuracy"

    def read(self, path, data, flag, labelled=True):
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    def fit_labels(self, train):
        return ["0", "1"]

    def check_labels(self, examples, labels, data, flag):
        pass

    def texts(self, examples):
        return ["x"] * len(examples)  # nothing to tokenise: the ids are given

    def featurize(self, examples, encodings, pipeline, labels, data):
        return [
            {"input_ids": e["ids"], "token_type_ids": [0] * len(e["ids"]), "labels": int(e["label"]), "doc": i}
            for i, e in enumerate(examples)
        ]

    def loss(self, logits, batch):
        import paddle.nn.functional as F

        return F.cross_entropy(logits, batch["labels"])

    def evaluate(self, logits, features, examples, labels, data):
        return {"accuracy": float((logits.argmax(1) == [f["labels"] for f in features]).mean())}

    def predict(self, logits, features, examples, labels, data):
        return [{"label": str(int(row.argmax()))} for row in logits]


def run(command: list[str], env: dict, cwd: str | None = None) -> tuple[str, float]:
    """(stdout, peak RSS of that process in MiB)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the largest so far
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if proc.returncode:
            raise SystemExit(f"{' '.join(command[:4])} failed:\n{err.read()[-3000:]}")
        return out.read(), usage.ru_maxrss / 1024


def ernie_ft(args, tmp: str, extra: tuple = (), source: str | None = None) -> dict:
    """ernie_ft's run of the batches: ``source``, another version's source tree, trains instead of this one."""
    sys.path.insert(0, BENCH)
    import common

    sys.argv = [
        "bench",
        "--shape",
        args.shape,
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--pad",
        "dynamic",
    ]
    bench = common.parse_args("ernie_ft")
    train = os.path.join(tmp, "train.jsonl")
    with open(train, "w") as f:
        for batch in common.make_batches(bench):
            for ids, mask, label in zip(batch["input_ids"], batch["attention_mask"], batch["labels"]):
                f.write(json.dumps({"ids": ids[mask == 1].tolist(), "label": str(label)}) + "\n")
    vocab = os.path.join(tmp, "vocab.txt")
    with open(vocab, "w") as f:  # ids only matter: [PAD] 0, [CLS] 1, [SEP] 2 as in the bench
        f.write(
            "\n".join(["[PAD]", "[CLS]", "[SEP]", "[MASK]"] + [f"t{i}" for i in range(4, bench.vocab - 1)] + ["[UNK]"])
            + "\n"
        )
    out = os.path.join(tmp, "run")
    command = [
        sys.executable,
        "-m",
        "ernie_ft",
        "--task",
        f"{os.path.abspath(__file__)}:TokenIds",
        "--train",
        train,
        "--model",
        f"scratch:{args.shape}",
        "--vocab",
        vocab,
        "--epochs",
        "1",
        "--batch-size",
        "32",
        "--lr",
        "1e-4",
        "--warmup",
        "0",
        "--max-grad-norm",
        "0",
        "--dropout",
        "0.1",
        "--threads",
        str(args.threads),
        "--log-steps",
        "1",
        "--max-len",
        "128",
        "--output",
        out,
        "--overwrite",
        *extra,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), **({"PYTHONPATH": source} if source else {})}
    _, rss = run(command, env, cwd=source)
    with open(os.path.join(out, "train_log.jsonl")) as f:
        records = [json.loads(line) for line in f][args.warmup :]
    tokens_per_s = statistics.median(r["tokens_per_s"] for r in records)
    return {
        "real_tokens_per_s": tokens_per_s,
        "peak_rss_mib": rss,
        "step_time_ms": 1000 * statistics.median(r["step_seconds"] for r in records),
    }


def baseline(script: str, python: str, args) -> dict:
    """A baseline's JSON line: ``script`` is ../shared/bench's, or a path (this repository's baselines)."""
    command = [
        python,
        os.path.join(BENCH, script),
        "--shape",
        args.shape,
        "--threads",
        str(args.threads),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--pad",
        "dynamic",
        "--group-by-length",
    ]
    from cpu import paddle_environ  # as cpu_line, imported where used

    out, _ = run(command, paddle_environ(os.environ))
    return json.loads(out.strip().splitlines()[-1])


HF_BF16 = os.path.join(ROOT, "benchmarks", "baselines", "baseline_hf_torch_bf16.py")
RECORDED = {"HF transformers / PyTorch": "HF PyTorch", "plain PaddleNLP": "PaddleNLP"}  # --record: row -> name
SHAPE_NAMES = {"nano": "4 x 312", "medium": "6 x 768"}  # as docs/benchmarks.md's rows name the shapes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="nano", choices=("nano", "medium"))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the stacks in turn this many times; ratios are per round, then the median",
    )
    p.add_argument(
        "--torch-python",
        default=os.environ.get("TORCH_PYTHON"),
        help="python of a venv with torch and transformers (see ../shared/bench/README.md)",
    )
    p.add_argument("--baseline", help="another ernie_ft's source tree to train beside this one (see above)")
    p.add_argument(
        "--amp",
        choices=("off", "bf16"),
        default="off",
        help="bf16: ernie_ft with --amp bf16 against itself in fp32 and HF under bf16 autocast (its Trainer's --bf16)",
    )
    p.add_argument(
        "--memory",
        action="store_true",
        help="instead: ernie_ft's peak memory with and without --recompute and --amp bf16",
    )
    p.add_argument("--record", action="store_true", help="write the ratios to benchmarks/results/training.json")
    args = p.parse_args()
    from cpu import line as cpu_line  # here, not above: ernie_ft loads this file as the task's module

    print(cpu_line(), flush=True)  # the CPU every row names
    if args.memory:
        return memory(args)
    rounds = []  # each round runs every stack once, back to back, so drift hits them alike
    for _ in range(args.rounds):
        results = {}
        with tempfile.TemporaryDirectory() as tmp:
            results["ernie_ft"] = ernie_ft(args, tmp, ("--amp", args.amp))
            if args.baseline:
                results["ernie_ft (baseline)"] = ernie_ft(args, tmp, source=os.path.abspath(args.baseline))
            if args.amp == "bf16":
                results["ernie_ft fp32"] = ernie_ft(args, tmp)
        if args.torch_python and args.amp == "bf16":
            results["HF transformers / PyTorch, bf16 autocast"] = baseline(HF_BF16, args.torch_python, args)
        elif args.torch_python:
            results["HF transformers / PyTorch"] = baseline("baseline_hf_torch.py", args.torch_python, args)
        if args.amp == "off":
            results["plain PaddleNLP"] = baseline("baseline_paddlenlp.py", sys.executable, args)
        rounds.append(results)
    print(
        f"shape {args.shape}, batch 32, max length 128, {'fp32' if args.amp == 'off' else '--amp ' + args.amp}, "
        f"dropout 0.1, {args.threads} threads; "
        f"median over {args.steps} steps after {args.warmup}; {args.rounds} round(s), medians across rounds\n"
    )
    print("| stack | real tokens/s | step time (ms) | peak RSS (MiB) | ernie_ft / this | per round |")
    print("|---|---|---|---|---|---|")
    for name in rounds[0]:

        def median(key, stack=name):
            return statistics.median(r[stack][key] for r in rounds)

        ratios = [r["ernie_ft"]["real_tokens_per_s"] / r[name]["real_tokens_per_s"] for r in rounds]
        print(
            f"| {name} | {median('real_tokens_per_s'):.0f} | {median('step_time_ms'):.0f} | "
            f"{median('peak_rss_mib'):.0f} | {statistics.median(ratios):.2f}x | "
            f"{' '.join(f'{x:.2f}' for x in ratios)} |"
        )
        if args.record and args.amp == "off" and name in RECORDED:  # the chart's figures (benchmarks/results.py)
            from results import record

            row = f"training, {args.shape} ({SHAPE_NAMES[args.shape]})"
            record("training", f"training, {args.shape} / {RECORDED[name]}", row, ratios, "bench_train.py")


def memory(args) -> None:
    """Peak resident memory of ernie_ft training runs, per configuration (a process each)."""
    configs = {
        "fp32": (),
        "fp32 + recompute": ("--recompute",),
        "bf16": ("--amp", "bf16"),
        "bf16 + recompute": ("--amp", "bf16", "--recompute"),
    }
    print(f"shape {args.shape}, batch 32, max length 128, {args.threads} threads, {args.steps} steps\n")
    print("| configuration | peak RSS (MiB) | real tokens/s |")
    print("|---|---|---|")
    for name, extra in configs.items():
        with tempfile.TemporaryDirectory() as tmp:
            r = ernie_ft(args, tmp, extra)
        print(f"| {name} | {r['peak_rss_mib']:.0f} | {r['real_tokens_per_s']:.0f} |", flush=True)


if __name__ == "__main__":
    main()

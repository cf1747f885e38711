"""Measure the jieba + BPE vocabulary extension on ChnSentiCorp, side by side with the base vocabulary.

    python benchmarks/bench_vocab.py [--sizes 2000 8000 20000] [--epochs 1] [--threads 1]
                                  [--hf-python PATH] [--output runs/bench_vocab.md]

1. Learns an extension per size from the train split (``python -m ernie_ft.vocab learn``).
2. Tokens per character on train/dev/test, and the inputs, real and padded tokens of one training
   epoch as the trainer builds them (windows of --max-len 128, stride 32, the length-grouped
   sampler with batch 32 and the recipe's seed).
3. Trains the same scratch model (``python -m ernie_ft.classify --config tasks/chnsenticorp.yaml
   --model scratch:tiny``) for --epochs with each vocabulary, one run at a time, in --passes
   passes: base first to largest, then back (base, +2k, +8k, +20k, +20k, +8k, +2k, base), so that
   a slow or busy stretch of a shared machine hits both sides. Reports each run's training wall
   time per epoch (from the trainer's per-step log lines, evaluation excluded), the run's process
   CPU time (less sensitive to other jobs on the machine; start-up and evaluation included) and
   dev/test accuracy (the same seed gives the same weights run after run).
4. Text-pipeline throughput in characters per second on the train texts: ernie_ft's pipeline in
   one process and with --num-proc 2, with and without an extension, a cached second run, jieba
   alone, PaddleNLP's ErnieTokenizer and HF BertTokenizerFast with the same vocabulary.
   In-process tokenisation runs with TOKENIZERS_PARALLELISM=false (one thread per process).

HF ``transformers`` is not a dependency of ernie_ft. For the BertTokenizerFast column, give
``--hf-python`` an interpreter that has it, e.g. a separate venv:
``python3 -m venv VENV && VENV/bin/pip install transformers tokenizers`` (then ``--hf-python VENV/bin/python``);
without one, the column is skipped with a message. The machine's conditions (CPU, cores, load
average before and after) are written with the tables to --output (markdown) and stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cpu import line as cpu_line

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # before tokenizers is imported: one thread per process

ROOT = Path(__file__).resolve().parents[1]
HF_CODE = """
import json, sys, time
from transformers import BertTokenizerFast
texts = json.load(open(sys.argv[2], encoding="utf-8"))
tok = BertTokenizerFast(vocab_file=sys.argv[1], do_lower_case=True, tokenize_chinese_chars=True)
tok(texts[:100], add_special_tokens=False, return_offsets_mapping=True)
start = time.perf_counter()
tok(texts, add_special_tokens=False, return_offsets_mapping=True)
print(time.perf_counter() - start)
"""


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, check=True, text=True, **kwargs)


def learn_extensions(out: Path, corpus: str, vocab: str, sizes: list[int]) -> dict:
    """{size: (directory, learn report)} learned from the train split with the CLI."""
    result = {}
    for size in sizes:
        directory = out / f"ext-{size}"
        if not (directory / "extension.json").is_file():
            run(
                [
                    sys.executable,
                    "-m",
                    "ernie_ft.vocab",
                    "learn",
                    "--corpus",
                    corpus,
                    "--base",
                    vocab,
                    "--size",
                    str(size),
                    "--output",
                    str(directory),
                ],
                stdout=subprocess.DEVNULL,
            )
        result[size] = (str(directory), json.loads((directory / "extension.json").read_text())["report"])
    return result


def epoch_tokens(cfg, task, examples, labels, pipeline, cache: str) -> dict:
    """Tokens per character per split, and the train epoch's inputs, real and padded tokens."""
    from ernie_ft.data.batching import LengthGroupedSampler

    out = {}
    for split, ex in examples.items():
        texts = task.texts(ex)
        encodings = pipeline.encode_many(texts, cache_dir=cache)
        out[f"tpc_{split}"] = sum(len(e.ids) for e in encodings) / sum(map(len, texts))
        if split == "train":
            features = task.featurize(ex, encodings, pipeline, labels, cfg.data)
            lengths = [len(f["input_ids"]) for f in features]
            batches = LengthGroupedSampler(lengths, cfg.train.batch_size, seed=cfg.train.seed).batches(0)
            out.update(
                inputs=len(features),
                real=sum(lengths),
                padded=sum(len(b) * max(lengths[i] for i in b) for b in batches),
            )
    return out


def train_run(name: str, out: Path, args, extension: str | None) -> dict:
    """One training run through the CLI; wall time per epoch from the time-stamped step lines."""
    output = out / f"train-{name}"
    cmd = [
        sys.executable,
        "-m",
        "ernie_ft.classify",
        "--config",
        args.recipe,
        "--model",
        "scratch:tiny",
        "--vocab",
        args.vocab,
        "--epochs",
        str(args.epochs),
        "--eval-steps",
        "0",
        "--threads",
        str(args.threads),
        "--log-steps",
        "1",
        "--output",
        str(output),
        "--overwrite",
    ] + (["--vocab-extension", extension] if extension else [])
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "TOKENIZERS_PARALLELISM"},
    )
    epoch_start, last_step, per_epoch, padding = None, None, [], []
    for line in proc.stdout:
        now = time.perf_counter()
        if line.startswith("epoch "):
            if epoch_start is not None:
                per_epoch.append(last_step - epoch_start)
            epoch_start = now
            padding.append(line.rsplit("padding", 1)[-1].strip())
        elif line.startswith("step "):
            last_step = now
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"training run {name} failed: {' '.join(cmd)}")
    per_epoch.append(last_step - epoch_start)
    metrics = json.loads((output / "metrics.json").read_text())
    return {
        "epoch_seconds": per_epoch,
        "wall": time.perf_counter() - start,
        "padding": padding,
        "cpu": usage.ru_utime + usage.ru_stime,
        "dev": metrics["dev"]["accuracy"],
        "test": metrics["test"]["accuracy"],
    }


def throughput(
    vocab: str, extension: str, extension_name: str, texts: list[str], hf_python: str | None, repeat: int
) -> list[tuple[str, str, float]]:
    """(tokenizer, what it returns, characters per second) rows: the best of ``repeat`` rounds, each
    round timing every tokenizer once, so that a busy moment of the machine hits them alike."""
    import jieba
    from paddlenlp.transformers import ErnieTokenizer

    from ernie_ft.text.pipeline import TextPipeline

    def clock(fn):
        def run():
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start

        return run

    cases = []  # (label, what it returns, () -> seconds)
    caches = tempfile.TemporaryDirectory()
    for name, pipe in (
        ("ernie_ft TextPipeline", TextPipeline(vocab)),
        (f"ernie_ft TextPipeline {extension_name}", TextPipeline(vocab, vocab_extension=extension)),
    ):
        pipe.encode(texts[0])  # jieba loads its dictionary once per process
        cache = tempfile.mkdtemp(dir=caches.name)
        pipe.encode_many(texts, cache_dir=cache)
        cases += [
            (f"{name}, 1 process", "ids, offsets, word ids", clock(lambda p=pipe: p.encode_many(texts))),
            (f"{name}, --num-proc 2", "ids, offsets, word ids", clock(lambda p=pipe: p.encode_many(texts, num_proc=2))),
            (
                f"{name}, cached second run",
                "ids, offsets, word ids (Arrow cache)",
                clock(lambda p=pipe, c=cache: p.encode_many(texts, cache_dir=c)),
            ),
        ]
    segmenter = jieba.Tokenizer()
    segmenter.lcut("预热")
    cases.append(("jieba alone (HMM on), 1 process", "words", clock(lambda: [segmenter.lcut(t) for t in texts])))
    ernie = ErnieTokenizer(vocab)
    cases.append(
        (
            "PaddleNLP ErnieTokenizer, 1 process",
            "ids",
            clock(lambda: [ernie.convert_tokens_to_ids(ernie.tokenize(t)) for t in texts]),
        )
    )
    if hf_python:
        source = Path(caches.name) / "texts.json"
        source.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
        for threads, parallel in (("1 thread", "false"), ("2 threads", "true")):
            env = {**os.environ, "TOKENIZERS_PARALLELISM": parallel, "RAYON_NUM_THREADS": "2"}
            cases.append(
                (
                    f"HF BertTokenizerFast, {threads}",
                    "ids, offsets (batch call)",
                    lambda env=env: float(
                        subprocess.run(
                            [hf_python, "-c", HF_CODE, vocab, str(source)],
                            env=env,
                            check=True,
                            text=True,
                            capture_output=True,
                        ).stdout.split()[-1]
                    ),
                )
            )
    else:
        print(
            "  HF BertTokenizerFast: skipped (transformers is not an ernie_ft dependency); pass --hf-python "
            "with an interpreter that has it, see this script's docstring",
            file=sys.stderr,
        )
    best = {}
    for round_ in range(repeat):
        for name, _, run in cases:
            best[name] = min(best.get(name, float("inf")), run())
        print(f"  round {round_ + 1}/{repeat} done", file=sys.stderr)
    caches.cleanup()
    chars = sum(map(len, texts))
    return [(name, what, chars / best[name]) for name, what, _ in cases]


def label(size: int) -> str:
    return f"+{size // 1000}k" if size % 1000 == 0 else f"+{size}"


def conditions(args) -> str:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
        platform.processor(),
    )
    return (
        f"{cpu}, {os.cpu_count()} cores (shared with other jobs), Python {platform.python_version()}, "
        f"--threads {args.threads}, {args.epochs} epoch(s), batch 32, max-len 128, stride 32, fp32"
    )


def main(args) -> None:
    print(cpu_line(), flush=True)  # the CPU every row names
    from ernie_ft.data.dataset import read_splits
    from ernie_ft.models.modeling import load_pipeline
    from ernie_ft.recipes import build_config, load_recipe
    from ernie_ft.task import load_task

    out = ROOT / args.workdir
    out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    os.chdir(ROOT)
    cfg = build_config(
        load_recipe(args.recipe), {"model": "scratch:tiny", **({"vocab": args.vocab} if args.vocab else {})}
    )
    vocab = args.vocab = cfg.model.vocab
    if not vocab:
        raise SystemExit("--vocab is needed: the recipe names no vocabulary to extend")
    print("learning extensions", file=sys.stderr)
    extensions = learn_extensions(out, cfg.data.train, vocab, args.sizes)
    task = load_task("classify")
    examples, labels = read_splits(task, cfg.data)
    cache = str(out / "cache")
    variants = [("base", None)] + [(label(size), extensions[size][0]) for size in args.sizes]
    stats = {}
    for name, directory in variants:
        cfg.model.vocab_extension = directory
        stats[name] = epoch_tokens(cfg, task, examples, labels, load_pipeline(cfg.model, cfg.data, None), cache)
    runs = {}
    order = [v for p in range(args.passes) for v in (variants if p % 2 == 0 else variants[::-1])]
    if args.skip_training:
        order = []
    for i, (name, directory) in enumerate(order):
        print(f"training {name} ({i + 1}/{len(order)})", file=sys.stderr)
        runs.setdefault(name, []).append(train_run(f"{name}-{len(runs.get(name, []))}", out, args, directory))
    print("throughput", file=sys.stderr)
    texts = task.texts(examples["train"])
    middle = min(args.sizes, key=lambda s: abs(s - 8000))
    speed = throughput(vocab, extensions[middle][0], label(middle), texts, args.hf_python, args.repeat)
    load_after = os.getloadavg()

    lines = [
        f"Conditions: {conditions(args)}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after.",
        "",
        f"Command: `python benchmarks/bench_vocab.py {' '.join(sys.argv[1:])}`",
        "",
        "| vocabulary | pieces learned / used on train | tokens/char train / dev / test | inputs per epoch | "
        "real tokens per epoch | padded tokens per epoch | train time per epoch, each run | CPU time per run "
        "| dev acc | test acc |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, directory in variants:
        s = stats[name]
        size = next((k for k, (d, _) in extensions.items() if d == directory), None)
        learned = (
            "-" if size is None else f"{extensions[size][1]['new_pieces']:,} / {extensions[size][1]['pieces_used']:,}"
        )
        done = runs.get(name, [])
        times = " / ".join(f"{sum(r['epoch_seconds']) / len(r['epoch_seconds']):.0f} s" for r in done) or "-"
        cpu = " / ".join(f"{r['cpu']:.0f} s" for r in done) or "-"
        dev = " / ".join(sorted({f"{r['dev']:.4f}" for r in done})) or "-"
        test = " / ".join(sorted({f"{r['test']:.4f}" for r in done})) or "-"
        trainer = f"; trainer: {done[0]['padding'][0]}" if done else ""
        lines.append(
            f"| {name} | {learned} | {s['tpc_train']:.3f} / {s['tpc_dev']:.3f} / {s['tpc_test']:.3f} | "
            f"{s['inputs']:,} | {s['real']:,} | {s['padded']:,} ({1 - s['real'] / s['padded']:.1%} padding"
            f"{trainer}) | {times} | {cpu} | {dev} | {test} |"
        )
    if order:
        lines.append(
            f"\nRun order: {', '.join(name for name, _ in order)}. One accuracy shown when every run of "
            "a vocabulary gave the same one (same seed, same weights)."
        )
    lines += [
        "",
        f"| tokenizer ({len(texts):,} train texts, {sum(map(len, texts)):,} characters; best of "
        f"{args.repeat}) | returns | characters per second |",
        "|---|---|---|",
    ]
    lines += [f"| {label} | {what} | {rate:,.0f} |" for label, what, rate in speed]
    if not args.hf_python:
        lines.append("| HF BertTokenizerFast | skipped: no --hf-python given | |")
    table = "\n".join(lines)
    print(table)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(table + "\n", encoding="utf-8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="tasks/chnsenticorp.yaml")
    parser.add_argument("--vocab", help="base vocabulary (default: the recipe's model.vocab)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 8000, 20000])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--passes",
        type=int,
        default=2,
        help="training passes over the vocabularies, alternately forward and back (default: 2)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="throughput rounds; the best is reported (default: 3)")
    parser.add_argument("--skip-training", action="store_true", help="tokens and throughput only, no training runs")
    parser.add_argument("--hf-python", help="python with transformers installed, for the BertTokenizerFast column")
    parser.add_argument("--workdir", default="runs/bench_vocab", help="extensions, runs and cache (under the repo)")
    parser.add_argument("--output", default="runs/bench_vocab.md")
    main(parser.parse_args())

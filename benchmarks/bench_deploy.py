"""CPU deployment side by side: one trained model through every engine, accuracy and documents/s end to end.

    python benchmarks/bench_deploy.py --classifier RUN [--ner RUN] [--threads 2] [--rounds 3] \
        [--torch-python PATH] [--work DIR]

For each trained run (a classifier scored on ChnSentiCorp dev, a tagger on CLUENER dev, from ../shared/data), the
checkpoint is exported three ways (``export``; ``export --format onnx --quantize int8-dynamic``; ``--quantize
int8-static``, calibrated on 256 windows of the run's training file) and run by five engines: dygraph, Paddle
Inference, ONNX Runtime fp32, ONNX Runtime int8 dynamic, int8 static. Each engine runs in a process of its own:

- the metric: ``evaluate`` on the whole dev file (accuracy; entity F1),
- documents/s: ``ernie_ft.Predictor`` answering the dev texts cut to --cut characters (one window each, the work
  optimum's baseline does), end to end: reading the records, tokenisation, the model, the answers; best of --rounds
  passes after one warm-up pass, and the share of each of the three steps,
- the model's size on disk (the files the engine reads) and the process's peak RSS.

With --torch-python, ``../shared/bench/baseline_optimum_int8.py`` runs the same cut texts through a same-shape
``BertForSequenceClassification`` in PyTorch, optimum's ONNX Runtime fp32 and its dynamic int8, in that
interpreter; the table gives ours over optimum's int8 documents/s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from cpu import line as cpu_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("ERNIE_FT_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
BENCH = os.environ.get("ERNIE_FT_SHARED_BENCH", os.path.join(ROOT, "..", "shared", "bench"))

ENGINES = [  # (row name, export directory, engine, files whose size counts)
    ("dygraph fp32", "checkpoint", "dygraph", ["model.safetensors"]),
    ("Paddle Inference fp32", "paddle", "inference", ["inference.json", "inference.pdiparams"]),
    ("ONNX Runtime fp32", "dynamic", "onnxruntime", ["model.onnx"]),
    ("ONNX Runtime int8 dynamic", "dynamic", "onnxruntime-int8", ["model.int8.onnx"]),
    ("ONNX Runtime int8 static", "static", "onnxruntime-int8", ["model.int8.onnx"]),
]


def dev_file(task: str) -> str:
    return os.path.join(SHARED, *{"classify": ("chnsenticorp", "dev.tsv"), "ner": ("cluener2020", "dev.json")}[task])


def dev_texts(task: str, cut: int) -> list[str]:
    path = dev_file(task)
    with open(path, encoding="utf-8") as f:
        if task == "classify":
            texts = [line.rstrip("\n").split("\t")[-1] for line in f][1:]
        else:
            texts = [json.loads(line)["text"] for line in f if line.strip()]
    return [t[:cut] for t in texts if t.strip()]


def worker(spec: dict) -> dict:
    """In a process of its own: the engine's metric, documents/s and peak RSS."""
    import resource
    import time

    from ernie_ft import Predictor
    from ernie_ft.inference.evaluate import EvaluateOptions, evaluate

    with tempfile.TemporaryDirectory() as out:
        metrics = evaluate(
            EvaluateOptions(
                spec["model"],
                dev_file(spec["task"]),
                output_dir=out,
                engine=spec["engine"],
                device="cpu",
                batch_size=32,
            )
        )
    records = [{"text": t} for t in dev_texts(spec["task"], spec["cut"])]
    predictor = Predictor(spec["model"], engine=spec["engine"], device="cpu", batch_size=32)
    predictor(records)  # warm-up
    best = None
    for _ in range(spec["rounds"]):  # predictor(records), its three steps timed apart
        ticks = [time.perf_counter()]
        examples, features = predictor.prepare(records)
        ticks.append(time.perf_counter())
        logits = predictor.logits(features, predictor.batch_size)
        ticks.append(time.perf_counter())
        predictor.answer(examples, features, logits)
        ticks.append(time.perf_counter())
        steps = [b - a for a, b in zip(ticks, ticks[1:])]
        best = steps if best is None or sum(steps) < sum(best) else best
    metric = "accuracy" if spec["task"] == "classify" else "f1"
    return {
        "metric": metrics[metric],
        "docs_per_s": len(records) / sum(best),
        "shares": [step / sum(best) for step in best],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_worker(spec: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": str(spec["threads"])},
    )
    if proc.returncode:
        sys.exit(f"{spec['engine']} on {spec['model']} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def export_all(run: str, work: str) -> dict:
    from ernie_ft.inference.export import export
    from ernie_ft.training.checkpoint import resolve_model_dir

    dirs = {"checkpoint": resolve_model_dir(run)}
    for name, options in (
        ("paddle", {}),
        ("dynamic", {"format": "onnx", "quantize": "int8-dynamic"}),
        ("static", {"format": "onnx", "quantize": "int8-static"}),
    ):
        target = os.path.join(work, name)
        done = os.path.join(target, "model.int8.onnx" if options else "inference.json")
        fresh = os.path.isfile(done) and os.path.getmtime(done) > os.path.getmtime(dirs["checkpoint"])
        dirs[name] = target if fresh else export(run, target, overwrite=True, **options)  # --work reused
    return dirs


def optimum(texts: list[str], work: str, args) -> dict:
    source = os.path.join(work, "texts.txt")
    with open(source, "w", encoding="utf-8") as f:
        f.write("\n".join(texts) + "\n")
    vocab = os.path.join(SHARED, "ernie-3.0-vocab", "vocab.txt")
    proc = subprocess.run(
        [args.torch_python, os.path.join(BENCH, "baseline_optimum_int8.py"), vocab, source, os.path.join(work, "hf")]
        + ["--threads", str(args.threads), "--rounds", str(args.rounds)],
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        sys.exit(f"optimum's baseline failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def size_mib(directory: str, files: list[str]) -> float:
    return sum(os.path.getsize(os.path.join(directory, f)) for f in files) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classifier", help="a classification run trained on ChnSentiCorp")
    parser.add_argument("--ner", help="a NER run trained on CLUENER")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cut", type=int, default=120, help="characters of each text timed (default: 120)")
    parser.add_argument("--torch-python", help="an interpreter with torch, transformers, optimum-onnx, onnxruntime")
    parser.add_argument("--work", help="directory for the exports (default: a temporary one)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    print(cpu_line(), flush=True)  # the CPU every row names
    work = args.work or tempfile.mkdtemp(prefix="bench_deploy_")
    print(
        "| model | engine | dev metric | documents/s | x Paddle Inference | reading + tokenisation / model / answers "
        "| size MiB | peak RSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|", flush=True)  # before any fork (exports) copies the buffer
    for task, run in (("classify", args.classifier), ("ner", args.ner)):
        if not run:
            continue
        dirs = export_all(run, os.path.join(work, task))
        rows = []
        for name, where, engine, files in ENGINES:
            spec = {"task": task, "model": dirs[where], "engine": engine, "cut": args.cut}
            rows.append(
                (
                    name,
                    size_mib(dirs[where], files),
                    run_worker({**spec, "rounds": args.rounds, "threads": args.threads}),
                )
            )
        paddle = rows[1][2]["docs_per_s"]
        metric = "accuracy" if task == "classify" else "entity F1"
        for name, size, r in rows:
            print(
                f"| {task} | {name} | {metric} {100 * r['metric']:.2f} | {r['docs_per_s']:.0f} | "
                f"{r['docs_per_s'] / paddle:.2f} | {' / '.join(f'{100 * x:.0f} %' for x in r['shares'])} | "
                f"{size:.0f} | {r['peak_rss_mib']:.0f} |",
                flush=True,
            )
        if task == "classify" and args.torch_python:
            hf = optimum(dev_texts(task, args.cut), work, args)
            ours = rows[3][2]["docs_per_s"]
            print(
                f"| classify | optimum (HF BERT, same shape): torch fp32 {hf['torch_fp32']:.0f}, ORT fp32 "
                f"{hf['ort_fp32']:.0f}, ORT int8 {hf['ort_int8']:.0f} docs/s | ours int8 dynamic / optimum int8 = "
                f"{ours / hf['ort_int8']:.2f} | | | | |",
                flush=True,
            )


if __name__ == "__main__":
    main()

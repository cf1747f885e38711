"""int8 against optimum and Paddle Inference, end to end, in one run: the VNNI and AVX2 rows of the deployment table.

    python benchmarks/bench_int8.py --classifier RUN --torch-python PATH [--quantize int8] [--rounds 5] \
        [--texts 1200] [--cut 120] [--threads 2] [--work DIR] [--baseline SOURCE]

RUN, a classifier trained on ChnSentiCorp, is exported twice: ``export`` (Paddle Inference, fp32) and ``export
--format onnx --quantize Q`` (ernie_ft's int8, chosen for this CPU unless Q names a target). Three engines then
predict the same ChnSentiCorp dev texts (the first --texts, cut to --cut characters), each in a process of its own
that starts once (start-up is not timed) and runs one pass whenever asked: ernie_ft's ``Predictor`` (what ``predict``
runs) with the int8 export and with the Paddle Inference export, and optimum's dynamic int8 of a same-shape
BERT (``optimum_worker.py``, in the interpreter given by --torch-python). The engines take turns in each round
(the machine is shared: load moves every engine alike within a round), and the table gives each engine's median
documents/s, the median of the per-round ratios, where the time goes (reading and tokenisation / the model / the
answers; for ernie_ft also the model's graph alone, ``session.run`` or Paddle's ``run``, inside the model step) and
the labels: accuracy on the dev labels, and the share of int8's labels equal to fp32's. Documents per CPU-second
(the process's CPU time in a pass, its threads' spinning included) say what each engine costs when other work
shares the cores and stretches the wall-clock figures.

With ``--baseline SOURCE`` (the source tree of another ernie_ft version, e.g. ``git worktree add /tmp/wt/base
HEAD``), RUN is also exported by that version and its two engines run that version's ``Predictor`` in the same
rounds: the output adds per engine the median of the per-round ratios of this version's documents/s to the
baseline's.
With ``--every-engine`` (the table of every engine, CPU C in docs/benchmarks.md):

    python benchmarks/bench_int8.py --every-engine --classifier RUN [--ner RUN] [--torch-python PATH] [--rounds 3]

each run (a classifier on ChnSentiCorp, a tagger on CLUENER) is exported for five engines: its checkpoint (dygraph),
``export`` (Paddle Inference), ``--format onnx`` (ONNX Runtime fp32), ``--quantize int8-dynamic`` and
``--quantize int8-static`` (calibrated on the run's training texts). Each engine's process first scores the whole
dev file with ``evaluate`` (accuracy; entity F1), then takes its turn in each round over the dev texts cut to --cut;
a task's engines (and optimum's int8 for the classifier, with --torch-python) take turns, one task after the other.
The table gives the dev metric, the median documents/s and its ratio to Paddle Inference's (the median of the
per-round ratios), where a pass goes, the engine's files on disk and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from cpu import line as cpu_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("ERNIE_FT_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))


def dev(count: int, cut: int) -> tuple[list[str], list[str]]:
    """(texts cut to ``cut`` characters, their labels): the first ``count`` ChnSentiCorp dev reviews."""
    with open(os.path.join(SHARED, "chnsenticorp", "dev.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1 : count + 1]
    return [text[:cut] for _, text in rows], [label for label, _ in rows]


class Timed:
    """A session (ONNX Runtime) or predictor (Paddle Inference) whose ``run`` adds its seconds to ``seconds``."""

    def __init__(self, inner):
        self.inner, self.seconds = inner, 0.0

    def run(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.inner.run(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start

    def __getattr__(self, name):
        return getattr(self.inner, name)


def serve_passes(spec: dict, records: list[dict], result) -> None:
    """An engine's worker: one ``Predictor`` on ``spec``'s export, a warm-up pass, then per ``go`` line on stdin a
    timed pass over ``records``, printed as JSON: documents/s, the seconds of reading + tokenisation / model /
    answers, the graph's own seconds, the process's CPU seconds, and ``result(answers)``'s fields."""
    from ernie_ft import Predictor

    predictor = Predictor(spec["model"], engine=spec["engine"], device="cpu", batch_size=32)
    model = predictor.loaded.model
    attribute = next((name for name in ("session", "predictor") if hasattr(model, name)), None)  # dygraph: neither
    graph = Timed(getattr(model, attribute)) if attribute else None
    if graph:
        setattr(model, attribute, graph)
    predictor(records)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        if graph:
            graph.seconds = 0.0
        cpu = time.process_time()
        ticks = [time.perf_counter()]
        examples, features = predictor.prepare(records)
        ticks.append(time.perf_counter())
        logits = predictor.logits(features, predictor.batch_size)
        ticks.append(time.perf_counter())
        answers = predictor.answer(examples, features, logits)
        ticks.append(time.perf_counter())
        seconds = [b - a for a, b in zip(ticks, ticks[1:])]
        out = {"docs_per_s": len(records) / sum(seconds), "seconds": seconds}
        out.update({"graph": graph.seconds} if graph else {})
        print(json.dumps({**out, "cpu": time.process_time() - cpu, **result(answers)}), flush=True)


def worker(spec: dict) -> None:
    """ernie_ft's side: ``serve_passes`` over the dev texts, with the accuracy and labels of each pass."""
    texts, gold = dev(spec["texts"], spec["cut"])

    def result(answers):
        labels = [a["label"] for a in answers]
        return {"accuracy": sum(a == b for a, b in zip(labels, gold)) / len(gold), "labels": labels}

    serve_passes(spec, [{"text": t} for t in texts], result)


def start(command: list[str], env: dict | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    ask(proc, None)
    return proc


def ask(proc: subprocess.Popen, line: str | None) -> dict:
    """Send ``line`` (if any) and read the worker's next JSON line (skipping what libraries print)."""
    if line is not None:
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
    for out in proc.stdout:
        if out.startswith("{"):
            return json.loads(out)
    sys.exit(f"a worker stopped ({proc.args[:3]}): exit {proc.wait()}")


def start_optimum(args, texts_file: str, work: str, env: dict) -> subprocess.Popen:
    """optimum's dynamic int8 of a same-shape BERT over the texts of ``texts_file`` (``optimum_worker.py``, in
    --torch-python's interpreter), started and ready."""
    vocab = os.path.join(SHARED, "ernie-3.0-vocab", "vocab.txt")
    worker_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optimum_worker.py")
    command = [args.torch_python, worker_file, vocab, texts_file, os.path.join(work, "hf")]
    return start([*command, "--threads", str(args.threads)], env)


def exports(run: str, work: str, quantize: str) -> dict:
    from ernie_ft.inference.export import export
    from ernie_ft.training.quiet import quiet_process

    quiet_process()

    return {
        "ernie_ft int8": export(run, os.path.join(work, "int8"), overwrite=True, format="onnx", quantize=quantize),
        "Paddle Inference fp32": export(run, os.path.join(work, "paddle"), overwrite=True),
    }


BEFORE = " (baseline)"
"""What ends the name of a --baseline engine."""
EXPORT_FLAGS = {
    "ernie_ft int8": ["--format", "onnx", "--quantize"],
    "Paddle Inference fp32": [],
    "ONNX Runtime fp32": ["--format", "onnx"],
}
"""The ``export`` flags of each engine's export (int8's end with --quantize's value)."""


def baseline_exports(run: str, work: str, quantize: str, source: str, names) -> dict:
    """The exports ``names`` (keys of ``EXPORT_FLAGS``) of ``run`` made by the ernie_ft in ``source`` (run there, in a
    process), by engine name + ``BEFORE``."""
    env = {**os.environ, "PYTHONPATH": source}
    dirs = {}
    for name in names:
        flags = EXPORT_FLAGS[name] + ([quantize] if "int8" in name else [])
        out = os.path.join(work, name.split()[0] + ("-int8" if "int8" in name else "-fp32"))
        command = [sys.executable, "-m", "ernie_ft", "export", "--model", os.path.abspath(run), "--output", out]
        subprocess.run([*command, "--overwrite", *flags], cwd=source, env=env, check=True, stdout=subprocess.DEVNULL)
        dirs[name + BEFORE] = out
    return dirs


def engine_arguments(parser) -> None:
    """The options every int8 benchmark takes: the int8 export, rounds, threads, where the exports go, and the
    hidden --worker an engine's own process is started with."""
    parser.add_argument("--quantize", default="int8", help="the int8 export's --quantize (default: int8, for this CPU)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", help="directory for the exports (default: a temporary one)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--baseline", help="another ernie_ft's source tree to run beside this one (see above)")


def print_machine() -> None:
    """The CPU every row names, and the load the run starts under."""
    print(cpu_line(), flush=True)
    print(f"load average at the start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classifier", help="a classification run trained on ChnSentiCorp (required)")
    parser.add_argument("--torch-python", help="an interpreter with torch, transformers, optimum-onnx (required)")
    parser.add_argument("--every-engine", action="store_true", help="instead: every engine's table (see above)")
    parser.add_argument("--ner", help="with --every-engine: a NER run trained on CLUENER")
    parser.add_argument("--texts", type=int, default=1200)
    parser.add_argument("--cut", type=int, default=120)
    parser.add_argument("--record", action="store_true", help="write the ratios to benchmarks/results/deployment.json")
    engine_arguments(parser)
    args = parser.parse_args()
    if args.worker:
        spec = json.loads(args.worker)
        return every_engine_worker(spec) if "task" in spec else worker(spec)
    if args.every_engine:
        if not (args.classifier or args.ner):
            parser.error("--every-engine needs --classifier or --ner")
        return every_engine(args)
    if not (args.classifier and args.torch_python):
        parser.error("--classifier and --torch-python are required")
    print_machine()
    work = args.work or tempfile.mkdtemp(prefix="bench_int8_")
    dirs = exports(args.classifier, work, args.quantize)
    with open(os.path.join(dirs["ernie_ft int8"], "onnx.json"), encoding="utf-8") as f:
        print("int8:", json.dumps(json.load(f)["files"]["model.int8.onnx"].get("quantization")), flush=True)
    if args.baseline:
        baseline = os.path.join(work, "baseline")
        dirs.update(baseline_exports(args.classifier, baseline, args.quantize, args.baseline, dirs))
    texts, _ = dev(args.texts, args.cut)
    source = os.path.join(work, "texts.txt")
    with open(source, "w", encoding="utf-8") as f:
        f.write("\n".join(texts) + "\n")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    engines = {}
    for name, directory in dirs.items():
        engine = "onnxruntime-int8" if "int8" in name else "inference"
        spec = {"model": directory, "engine": engine, "texts": args.texts, "cut": args.cut}
        paths = {"PYTHONPATH": args.baseline} if name.endswith(BEFORE) else {}
        engines[name] = start([sys.executable, __file__, "--worker", json.dumps(spec)], {**env, **paths})
    engines["optimum int8"] = start_optimum(args, source, work, env)
    report(take_turns(engines, args.rounds), os.getloadavg(), args.record)


def take_turns(engines: dict, count: int) -> dict:
    """Each engine's pass results (``ask(proc, "go")``), the engines taking turns in each of ``count`` rounds; the
    engines' processes are ended afterwards."""
    rounds = {name: [] for name in engines}
    for n in range(count):
        for name, proc in engines.items():
            rounds[name].append(ask(proc, "go"))
        print(f"round {n + 1}: " + ", ".join(f"{k} {v[-1]['docs_per_s']:.0f}" for k, v in rounds.items()), flush=True)
    for proc in engines.values():
        proc.stdin.close()
        proc.wait()
    return rounds


RECORDED = {  # --record: the pairs the chart draws, by the comparison each is in benchmarks/results/deployment.json
    "ernie_ft int8 / Paddle fp32": "deployment, int8 / Paddle Inference fp32, classify",
    "ernie_ft int8 / optimum int8": "deployment, int8 / optimum int8, classify",
}


def report(rounds: dict, load: tuple, record_ratios: bool = False) -> None:
    ours, optimum, paddle = rounds["ernie_ft int8"], rounds["optimum int8"], rounds["Paddle Inference fp32"]
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in load)}\n")
    print(
        "| engine | documents/s (median) | documents per CPU-second (median) | reading + tokenisation / model / "
        "answers | model's graph alone | accuracy | labels equal to fp32's |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, results in rounds.items():
        median = statistics.median(r["docs_per_s"] for r in results)
        per_cpu = statistics.median(r["docs_per_s"] * sum(r["seconds"]) / r["cpu"] for r in results)
        seconds = [statistics.median(r["seconds"][i] for r in results) for i in range(3)]
        shares = " / ".join(f"{100 * s / sum(seconds):.0f} %" for s in seconds)
        graph = (
            f"{100 * statistics.median(r['graph'] / sum(r['seconds']) for r in results):.0f} % of a pass"
            if "graph" in results[0]
            else ""
        )
        accuracy = f"{100 * results[-1]['accuracy']:.2f}" if "accuracy" in results[-1] else ""
        if name == "optimum int8":
            agree = f"{100 * results[-1]['agree_with_fp32']:.2f} % (its PyTorch fp32)"
        else:  # the baseline's labels against its own fp32's
            fp32 = rounds["Paddle Inference fp32" + (BEFORE if name.endswith(BEFORE) else "")]
            same = sum(a == b for a, b in zip(results[-1]["labels"], fp32[-1]["labels"]))
            agree = f"{100 * same / len(fp32[-1]['labels']):.2f} %"
        print(f"| {name} | {median:.0f} | {per_cpu:.0f} | {shares} | {graph} | {accuracy} | {agree} |")
    pairs = [("ernie_ft int8 / optimum int8", ours, optimum), ("ernie_ft int8 / Paddle fp32", ours, paddle)]
    names = [name for name in EXPORT_FLAGS if name + BEFORE in rounds]
    pairs += [(f"{name}: this version / baseline", rounds[name], rounds[name + BEFORE]) for name in names]
    for label, num, den in pairs:
        ratios = [a["docs_per_s"] / b["docs_per_s"] for a, b in zip(num, den)]
        print(f"\n{label}: {statistics.median(ratios):.2f}x (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
        if record_ratios and label in RECORDED:  # the chart's figures (benchmarks/results.py)
            from results import record

            record("deployment", RECORDED[label], None, ratios, "bench_int8.py")


# ---------------------------------------------------------------- --every-engine: the table of every engine

DEV_FILES = {"classify": ("chnsenticorp", "dev.tsv"), "ner": ("cluener2020", "dev.json")}
EVERY_ENGINE = {  # row: (export options, or None for the checkpoint itself; engine; the files whose size counts)
    "dygraph fp32": (None, "dygraph", ["model.safetensors"]),
    "Paddle Inference fp32": ({}, "inference", ["inference.json", "inference.pdiparams"]),
    "ONNX Runtime fp32": ({"format": "onnx"}, "onnxruntime", ["model.onnx"]),
    "ONNX Runtime int8 dynamic": (
        {"format": "onnx", "quantize": "int8-dynamic"},
        "onnxruntime-int8",
        ["model.int8.onnx"],
    ),
    "ONNX Runtime int8 static": (
        {"format": "onnx", "quantize": "int8-static"},
        "onnxruntime-int8",
        ["model.int8.onnx"],
    ),
}
RECORDED_EVERY = {  # --record with --every-engine: (task, engine over Paddle Inference fp32) -> comparison
    ("classify", "ONNX Runtime int8 static"): "deployment, int8 / Paddle Inference fp32, classify",
    ("ner", "ONNX Runtime int8 static"): "deployment, int8 / Paddle Inference fp32, NER",
}


def dev_texts(task: str, count: int, cut: int) -> list[str]:
    """The first ``count`` texts of ``task``'s dev file (ChnSentiCorp, CLUENER), cut to ``cut`` characters."""
    if task == "classify":
        return dev(count, cut)[0]
    with open(os.path.join(SHARED, *DEV_FILES[task]), encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    return [text[:cut] for text in texts[:count] if text.strip()]


def every_engine_worker(spec: dict) -> None:
    """An engine's process: ``evaluate`` on the whole dev file first, then ``serve_passes`` over the dev texts, each
    pass with the dev metric and the process's peak RSS so far."""
    import contextlib
    import resource

    from ernie_ft.inference.evaluate import EvaluateOptions, evaluate

    dev_file = os.path.join(SHARED, *DEV_FILES[spec["task"]])
    with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(sys.stderr):  # stdout: the JSON lines
        options = EvaluateOptions(spec["model"], dev_file, out, engine=spec["engine"], device="cpu", batch_size=32)
        metrics = evaluate(options)
    metric = metrics["accuracy" if spec["task"] == "classify" else "f1"]

    def result(answers):
        return {"metric": metric, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}

    serve_passes(spec, [{"text": t} for t in dev_texts(spec["task"], spec["texts"], spec["cut"])], result)


def every_engine_exports(run: str, work: str) -> dict:
    """Row name -> (directory, engine, size in MiB) of ``run``'s five engines, exported into ``work``."""
    from ernie_ft.inference.export import export
    from ernie_ft.training.checkpoint import resolve_model_dir
    from ernie_ft.training.quiet import quiet_process

    quiet_process()
    made = {}
    for name, (options, engine, files) in EVERY_ENGINE.items():
        target = os.path.join(work, name.lower().replace(" ", "-"))
        directory = resolve_model_dir(run) if options is None else export(run, target, overwrite=True, **options)
        size = sum(os.path.getsize(os.path.join(directory, f)) for f in files) / 2**20
        made[name] = (directory, engine, size)
    return made


def every_engine(args) -> None:
    """The table of every engine: per task, its engines (and optimum's int8 for the classifier) taking turns."""
    print_machine()
    work = args.work or tempfile.mkdtemp(prefix="bench_int8_")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    print(
        "| model | engine | dev metric | documents/s | x Paddle Inference (per round) | reading + tokenisation / "
        "model / answers | size MiB | peak RSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|", flush=True)  # before any fork (exports) copies the buffer
    for task, run in (("classify", args.classifier), ("ner", args.ner)):
        if not run:
            continue
        made = every_engine_exports(run, os.path.join(work, task))
        engines = {}
        for name, (directory, engine, _) in made.items():
            spec = {"task": task, "model": directory, "engine": engine, "texts": args.texts, "cut": args.cut}
            engines[name] = start([sys.executable, __file__, "--worker", json.dumps(spec)], env)
        if task == "classify" and args.torch_python:
            source = os.path.join(work, "texts.txt")
            with open(source, "w", encoding="utf-8") as f:
                f.write("\n".join(dev_texts(task, args.texts, args.cut)) + "\n")
            engines["optimum int8"] = start_optimum(args, source, work, env)
        rounds = take_turns(engines, args.rounds)
        report_every(task, rounds, {name: size for name, (_, _, size) in made.items()}, args.record)


def report_every(task: str, rounds: dict, sizes: dict, record_ratios: bool) -> None:
    """``task``'s rows of the table of every engine, and int8 static and dynamic over optimum's int8 when it ran."""
    paddle = rounds["Paddle Inference fp32"]
    for name, results in rounds.items():
        ratios = [a["docs_per_s"] / b["docs_per_s"] for a, b in zip(results, paddle)]
        seconds = [statistics.median(r["seconds"][i] for r in results) for i in range(3)]
        shares = " / ".join(f"{100 * s / sum(seconds):.0f} %" for s in seconds)
        what = "accuracy" if task == "classify" else "entity F1"
        metric = f"{what} {100 * results[-1]['metric']:.2f}" if "metric" in results[-1] else ""
        size, rss = f"{sizes[name]:.0f}" if name in sizes else "", results[-1].get("peak_rss_mib")
        print(
            f"| {task} | {name} | {metric} | "
            f"{statistics.median(r['docs_per_s'] for r in results):.0f} | {statistics.median(ratios):.2f} "
            f"({', '.join(f'{x:.2f}' for x in ratios)}) | {shares} | {size} | {f'{rss:.0f}' if rss else ''} |",
            flush=True,
        )
        if record_ratios and (task, name) in RECORDED_EVERY:  # the chart's figures (benchmarks/results.py)
            from results import record

            record("deployment", RECORDED_EVERY[(task, name)], None, ratios, "bench_int8.py")
    for method in ("static", "dynamic") if "optimum int8" in rounds else ():
        ours, theirs = rounds[f"ONNX Runtime int8 {method}"], rounds["optimum int8"]
        ratios = [a["docs_per_s"] / b["docs_per_s"] for a, b in zip(ours, theirs)]
        print(f"\nint8 {method} / optimum int8: {statistics.median(ratios):.2f}x (rounds: {ratios})")
        if record_ratios and method == "static":  # --quantize int8's
            from results import record

            record("deployment", "deployment, int8 / optimum int8, classify", None, ratios, "bench_int8.py")


if __name__ == "__main__":
    main()

"""Information extraction: predict documents/s of the int8 ONNX export against the fp32 exports.

    python benchmarks/bench_ie_predict.py [--nested RUN] [--relation RUN] [--rounds 5] [--texts 500] [--threads 2] \
        [--quantize int8] [--work DIR] [--baseline SOURCE]

Each run (a ``ner --nested`` model trained on CMeEE-V2, a ``relation`` model trained on DuIE) is exported three
times: ``export`` (Paddle Inference, fp32), ``export --format onnx --quantize Q`` (int8, chosen for this CPU unless Q
names a target) and ``export --format onnx`` (ONNX Runtime, fp32: int8 against it is the quantization alone, against
Paddle Inference the engine too). Each export predicts the first --texts test texts of its data set
(``cmeee-v2/test.json``, ``duie-5000/test.jsonl``, whole: a text longer than the model's --max-len becomes windows)
in a process of its own that starts once (start-up not timed) and runs one pass per round through
``ernie_ft.Predictor`` (what ``predict`` runs: reading and tokenisation, the model, the decoder on the exported
logits). The six engines take turns in each round, so load on the shared machine moves them alike. The output gives
each engine's median documents/s, where a pass goes, the median of the per-round ratios of int8 to each fp32 engine,
and how far int8's answers agree with each fp32 engine's: entities (start, end, type) for the nested tagger; triples
(subject span, predicate, object span) and the entities they join (start, end, role) for the relation extractor,
scored as F1 with the fp32 answers as the gold.

With ``--baseline SOURCE`` (the source tree of another ernie_ft version, e.g. ``git worktree add /tmp/wt/base
HEAD``), each run is also exported by that version (``python -m ernie_ft export`` run in SOURCE) and its three
engines run that version's ``Predictor`` (``PYTHONPATH=SOURCE``) in the same rounds, taking turns with this
version's: the output adds per engine the median of the per-round ratios of this version's documents/s to the
baseline's, and how far the two versions' answers agree (the baseline's as the gold).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

from bench_int8 import (
    BEFORE,
    SHARED,
    ask,
    baseline_exports,
    engine_arguments,
    exports,
    print_machine,
    serve_passes,
    start,
)

FP32 = ("Paddle Inference fp32", "ONNX Runtime fp32")
ENGINE = {"ernie_ft int8": "onnxruntime-int8", "Paddle Inference fp32": "inference", "ONNX Runtime fp32": "onnxruntime"}
DATA = {"nested": ("cmeee-v2", "test.json"), "relation": ("duie-5000", "test.jsonl")}


def texts(kind: str, count: int) -> list[str]:
    """The first ``count`` test texts of the data set ``kind`` was trained on (a JSON array or JSON Lines)."""
    with open(os.path.join(SHARED, *DATA[kind]), encoding="utf-8") as f:
        rows = json.load(f) if kind == "nested" else [json.loads(line) for line in f if line.strip()]
    return [row["text"] for row in rows[:count]]


def found(answer: dict) -> dict:
    """What an answer found, as comparable tuples: entities, and for a relation extractor its triples."""
    if "relations" not in answer:
        return {"entities": sorted((e["start"], e["end"], e["type"]) for e in answer["entities"])}
    triples = [
        (r["subject"]["start"], r["subject"]["end"], r["predicate"], r["object"]["start"], r["object"]["end"])
        for r in answer["relations"]
    ]
    return {
        "triples": sorted(triples),
        "entities": sorted((e["start"], e["end"], e["role"]) for e in answer["entities"]),
    }


def worker(spec: dict) -> None:
    """One export's worker (``serve_passes``), with what each pass found."""
    records = [{"text": t} for t in texts(spec["kind"], spec["texts"])]
    serve_passes(spec, records, lambda answers: {"found": [found(a) for a in answers]})


def agreement(int8: list[dict], fp32: list[dict], what: str) -> str:
    """int8's ``what`` scored against fp32's as the gold: F1, the counts, and the documents answered alike."""
    a = [set(map(tuple, doc[what])) for doc in int8]
    b = [set(map(tuple, doc[what])) for doc in fp32]
    both, ours, theirs = (sum(len(x & y) for x, y in zip(a, b)), sum(map(len, a)), sum(map(len, b)))
    f1 = 2 * both / (ours + theirs) if ours + theirs else 1.0
    alike = sum(x == y for x, y in zip(a, b)) / len(a)
    return f"{what}: F1 {f1:.4f} ({both} shared; int8 {ours}, fp32 {theirs}); documents alike {100 * alike:.1f} %"


def report(rounds: dict, load: tuple) -> None:
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in load)}\n")
    print("| model | engine | documents/s (median) | reading + tokenisation / model / answers | model's graph alone |")
    print("|---|---|---|---|---|")
    for (kind, engine), results in rounds.items():
        median = statistics.median(r["docs_per_s"] for r in results)
        seconds = [statistics.median(r["seconds"][i] for r in results) for i in range(3)]
        shares = " / ".join(f"{100 * s / sum(seconds):.0f} %" for s in seconds)
        graph = statistics.median(r["graph"] / sum(r["seconds"]) for r in results)
        print(f"| {kind} | {engine} | {median:.1f} | {shares} | {100 * graph:.0f} % of a pass |")
    for kind in sorted({kind for kind, _ in rounds}):
        print()
        for name in FP32:
            compare(rounds, kind, ("ernie_ft int8", "int8"), (name, name))
        for name in ENGINE:
            if (kind, name + BEFORE) in rounds:
                compare(rounds, kind, (name, f"{name}: this version"), (name + BEFORE, "baseline"))


def compare(rounds: dict, kind: str, ours: tuple, theirs: tuple) -> None:
    """The median per-round ratio of the engine ``ours`` (key, shown name) to ``theirs``, and their answers'
    agreement (``theirs`` as the gold)."""
    a, b = rounds[(kind, ours[0])], rounds[(kind, theirs[0])]
    ratios = [x["docs_per_s"] / y["docs_per_s"] for x, y in zip(a, b)]
    each = ", ".join(f"{r:.2f}" for r in ratios)
    print(f"{kind}: {ours[1]} / {theirs[1]} {statistics.median(ratios):.2f}x (rounds: {each})")
    for what in a[-1]["found"][0]:
        shown = agreement(a[-1]["found"], b[-1]["found"], what).replace("int8", "ours").replace("fp32", "theirs")
        print(f"{kind}: {ours[1]} against {theirs[1]}: {shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nested", help="a ner --nested run trained on CMeEE-V2")
    parser.add_argument("--relation", help="a relation run trained on DuIE")
    parser.add_argument("--texts", type=int, default=500, help="test texts per model (default: 500, the whole split)")
    engine_arguments(parser)
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    if not (args.nested or args.relation):
        parser.error("give --nested, --relation or both")
    print_machine()
    from ernie_ft.inference.export import export

    work = args.work or tempfile.mkdtemp(prefix="bench_ie_predict_")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    engines = {}
    for kind, run in (("nested", args.nested), ("relation", args.relation)):
        if not run:
            continue
        dirs = exports(run, os.path.join(work, kind), args.quantize)
        dirs["ONNX Runtime fp32"] = export(run, os.path.join(work, kind, "onnx"), overwrite=True, format="onnx")
        with open(os.path.join(dirs["ernie_ft int8"], "onnx.json"), encoding="utf-8") as f:
            quantization = json.load(f)["files"]["model.int8.onnx"].get("quantization")
        print(f"{kind} int8: {json.dumps(quantization)}", flush=True)
        if args.baseline:
            baseline = os.path.join(work, kind, "baseline")
            dirs.update(baseline_exports(run, baseline, args.quantize, args.baseline, ENGINE))
        for name, directory in dirs.items():
            spec = {"model": directory, "engine": ENGINE[name.removesuffix(BEFORE)], "kind": kind, "texts": args.texts}
            paths = {"PYTHONPATH": args.baseline} if name.endswith(BEFORE) else {}
            engines[(kind, name)] = start([sys.executable, __file__, "--worker", json.dumps(spec)], {**env, **paths})
    rounds = {key: [] for key in engines}
    for n in range(args.rounds):
        for key, proc in engines.items():
            rounds[key].append(ask(proc, "go"))
        line = ", ".join(f"{kind} {name} {v[-1]['docs_per_s']:.1f}" for (kind, name), v in rounds.items())
        print(f"round {n + 1}: {line}", flush=True)
    for proc in engines.values():
        proc.stdin.close()
        proc.wait()
    report(rounds, os.getloadavg())


if __name__ == "__main__":
    main()

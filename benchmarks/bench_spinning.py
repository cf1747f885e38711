"""ONNX Runtime's spinning threads when the cores are shared: the int8 export with ONNX Runtime's intra-op threads
spinning between parallel sections (ORT's default) and blocking instead, and Paddle Inference fp32 beside them,
idle and beside one busy process.

    python benchmarks/bench_spinning.py --classifier RUN [--rounds 7] [--work DIR]
    python benchmarks/bench_spinning.py --int8 DIR --paddle DIR          # exports made already

RUN (a ChnSentiCorp classifier) is exported twice (``export --format onnx --quantize int8`` and the Paddle Inference
export). Each engine runs ``bench_int8.serve_passes`` (``Predictor`` over the dev reviews cut to ``--cut``
characters, end to end) in a process of its own started once; the two int8 workers differ only in the session config
entry ``session.intra_op.allow_spinning`` ("1" or "0", set on the session ``OnnxModel`` creates and read back from
it; "0" is what ``OnnxModel`` sets since these figures). In each round every engine makes one pass idle, then one
busy process is started (a pure-Python loop: one core's worth of other work, unpinned, started and killed by this
program), every engine makes one pass beside it, and it is killed; each round the engines start one place further
on. The output: per engine and condition the medians of documents/s, of documents per CPU-second of the engine's
process (its threads' spinning included) and of the share of a core the busy process got during the engine's pass
(what the engine left to its neighbour), and the per-round ratios.
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

from bench_int8 import ask, dev, print_machine, start
from bench_int8 import worker as int8_worker

SPINNING = "session.intra_op.allow_spinning"
ENGINES = {
    "int8, spinning (ORT's default)": {"engine": "onnxruntime-int8", "config": {SPINNING: "1"}},
    "int8, no spinning": {"engine": "onnxruntime-int8", "config": {SPINNING: "0"}},
    "Paddle Inference fp32": {"engine": "inference"},
}
BUSY = "import sys\nprint('{}', flush=True)\nwhile True:\n    pass\n"
"""The neighbour: one core's worth of pure-Python work until killed."""


def worker(spec: dict) -> None:
    """``bench_int8.worker`` with ``spec['config']``'s session config entries added to each ONNX Runtime session."""
    config = spec.get("config")
    if config:
        import onnxruntime

        original = onnxruntime.InferenceSession

        def session(path, options, **kwargs):
            for key, value in config.items():
                options.add_session_config_entry(key, value)
            made = original(path, options, **kwargs)
            read = {key: made.get_session_options().get_session_config_entry(key) for key in config}
            if read != config:
                sys.exit(f"the session holds {read}, not {config}")
            return made

        onnxruntime.InferenceSession = session
    int8_worker(spec)


def busy() -> subprocess.Popen:
    """Start the neighbour and wait until its loop runs (its first line)."""
    proc = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    return proc


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_pass(proc: subprocess.Popen, neighbour: subprocess.Popen | None) -> dict:
    """One pass of an engine's worker, with the share of a core ``neighbour`` got meanwhile."""
    before, start_time = (cpu_seconds(neighbour.pid) if neighbour else 0.0), time.perf_counter()
    result = ask(proc, "go")
    if neighbour:
        result["neighbour"] = (cpu_seconds(neighbour.pid) - before) / (time.perf_counter() - start_time)
    return result


def exports(run: str, work: str) -> tuple[str, str]:
    from ernie_ft.inference.export import export
    from ernie_ft.training.quiet import quiet_process

    quiet_process()
    int8 = export(run, os.path.join(work, "int8"), overwrite=True, format="onnx", quantize="int8")
    return int8, export(run, os.path.join(work, "paddle"), overwrite=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classifier", help="a classification run trained on ChnSentiCorp (exported here)")
    parser.add_argument("--int8", help="instead: an export made with --format onnx --quantize int8")
    parser.add_argument("--paddle", help="and a Paddle Inference export of the same run")
    parser.add_argument("--texts", type=int, default=1200)
    parser.add_argument("--cut", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", help="directory for the exports (default: a temporary one)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    if not (args.classifier or (args.int8 and args.paddle)):
        parser.error("--classifier, or --int8 and --paddle, are required")
    print_machine()
    if args.classifier:
        args.int8, args.paddle = exports(args.classifier, args.work or tempfile.mkdtemp(prefix="bench_spinning_"))
    dev(args.texts, args.cut)  # the data is there before any worker starts
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    engines = {}
    for name, spec in ENGINES.items():
        model = args.paddle if spec["engine"] == "inference" else args.int8
        spec = {**spec, "model": model, "texts": args.texts, "cut": args.cut}
        engines[name] = start([sys.executable, __file__, "--worker", json.dumps(spec)], env)
    rounds = {(name, load): [] for name in engines for load in ("idle", "busy")}
    order = list(engines)
    try:
        for n in range(args.rounds):
            loads = []
            for load in ("idle", "busy"):
                neighbour = busy() if load == "busy" else None
                try:
                    for name in order[n % len(order) :] + order[: n % len(order)]:  # each round starts elsewhere
                        rounds[name, load].append(timed_pass(engines[name], neighbour))
                finally:
                    if neighbour:
                        neighbour.kill()
                        neighbour.wait()
                loads.append(f"{load}: " + ", ".join(f"{k} {rounds[k, load][-1]['docs_per_s']:.0f}" for k in engines))
            print(f"round {n + 1} (load average {os.getloadavg()[0]:.1f}): {'; '.join(loads)}", flush=True)
    finally:
        for proc in engines.values():
            proc.stdin.close()
            proc.wait()
    report(rounds, list(engines))


def report(rounds: dict, names: list[str]) -> None:
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print(
        "| engine | beside | documents/s (median) | documents per CPU-second (median) | the busy process's share of a "
        "core during the pass (median) | accuracy |"
    )
    print("|---|---|---|---|---|---|")
    for (name, load), results in rounds.items():
        median = statistics.median(r["docs_per_s"] for r in results)
        per_cpu = statistics.median(r["docs_per_s"] * sum(r["seconds"]) / r["cpu"] for r in results)
        share = f"{100 * statistics.median(r['neighbour'] for r in results):.0f} %" if load == "busy" else ""
        beside = "one busy process" if load == "busy" else "nothing (idle)"
        print(f"| {name} | {beside} | {median:.0f} | {per_cpu:.0f} | {share} | {100 * results[-1]['accuracy']:.2f} |")
    on, off, paddle = names
    for load in ("idle", "busy"):
        for num, den in ((off, on), (on, paddle), (off, paddle)):
            print_ratios(f"{load}: {num} / {den}", rounds[num, load], rounds[den, load])
    for name in names:
        print_ratios(f"{name}: busy / idle", rounds[name, "busy"], rounds[name, "idle"])


def print_ratios(label: str, numerator: list[dict], denominator: list[dict]) -> None:
    """The median of the per-round ratios of documents/s, and each round's."""
    ratios = [a["docs_per_s"] / b["docs_per_s"] for a, b in zip(numerator, denominator)]
    print(f"{label}: {statistics.median(ratios):.2f}x (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()

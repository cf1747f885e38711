"""Cold start: a fresh process answering 10 texts with an int8 export, against transformers and optimum.

    python benchmarks/bench_cold_start.py --torch-python PATH [--runtime-python PATH] [--rounds 5] [--work DIR]

The model is the nano shape (4 x 312, 12 heads, the ERNIE 3.0 vocabulary, random weights: start-up does not depend
on them) on both sides. ernie_ft's is trained a few steps from ``scratch:nano`` and exported with ``export --format
onnx --quantize int8``; the peers' is a same-shape ``BertForSequenceClassification`` saved with its fast tokenizer
and exported by optimum with its dynamic int8 (AVX-512 VNNI config). Set-up is not timed. Then, in each round, each
stack answers the same 10 texts (``data/predict.txt``) in a process of its own, started cold:

- ernie_ft runtime: ``python -m ernie_ft predict`` in --runtime-python (``pip install ernie_ft``, no Paddle;
  default ``.venv-runtime/bin/python`` where it exists);
- ernie_ft full install: the same command in this interpreter (Paddle and PaddleNLP installed, not imported);
- transformers ``pipeline("text-classification")`` on PyTorch, in --torch-python;
- optimum's ``ORTModelForSequenceClassification`` on the int8 model in a transformers pipeline, in --torch-python.

Then ernie_ft's ``serve`` in each of its installs, timed from its start to its first answer to the same 10 texts.

Each figure is the wall time from starting the process to its exit, after the answers are written to a file, and
the process's peak RSS; the stacks take turns within a round and the table gives medians over the rounds, the
ratios to ernie_ft's runtime, and each interpreter's installed size (its site-packages). docs/benchmarks.md, *Cold
start*, has the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from cpu import line as cpu_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("ERNIE_FT_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
VOCAB = os.path.join(SHARED, "ernie-3.0-vocab", "vocab.txt")
TEXTS = os.path.join(ROOT, "data", "predict.txt")

PEER_SETUP = """
import pathlib, sys
sys.path.insert(0, sys.argv[3])
from optimum_worker import nano_bert, optimum_int8
work = pathlib.Path(sys.argv[2])
tokenizer, _ = nano_bert(sys.argv[1], work)
tokenizer.save_pretrained(optimum_int8(work, "int8"))
"""

PIPELINE = """
import json, sys
from transformers import pipeline
texts = open(sys.argv[2], encoding="utf-8").read().splitlines()
answer = pipeline("text-classification", model=sys.argv[1], device="cpu")
json.dump(answer(texts), open(sys.argv[3], "w"))
"""

OPTIMUM = """
import json, sys
from optimum.onnxruntime import ORTModelForSequenceClassification
from transformers import AutoTokenizer, pipeline
texts = open(sys.argv[2], encoding="utf-8").read().splitlines()
model = ORTModelForSequenceClassification.from_pretrained(sys.argv[1], file_name="model_quantized.onnx")
answer = pipeline("text-classification", model=model, tokenizer=AutoTokenizer.from_pretrained(sys.argv[1]))
json.dump(answer(texts), open(sys.argv[3], "w"))
"""


def run_cold(command: list[str], env: dict) -> tuple[float, float]:
    """(seconds from start to exit, peak RSS in MiB) of ``command`` in a fresh process, which must succeed."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status):
            err.seek(0)
            raise SystemExit(f"{' '.join(command[:5])} failed:\n{err.read()[-3000:]}")
    return seconds, usage.ru_maxrss / 1024


def serve_cold(python: str, export: str, texts: list[str], env: dict) -> float:
    """Seconds from starting ``python -m ernie_ft serve`` on ``export`` to its first answer to the ``texts`` (a
    POST /v1/predict sent every 10 ms until one is answered), then the server is stopped."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    body = json.dumps({"inputs": [{"text": t} for t in texts]}).encode("utf-8")
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/predict", body, {"Content-Type": "application/json"})
    start = time.perf_counter()
    command = [python, "-m", "ernie_ft", "serve", "--model", export, "--port", str(port)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    try:
        while proc.poll() is None:
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    if answer.status == 200:
                        return time.perf_counter() - start
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.01)  # not listening yet: poll again
        raise SystemExit(f"serve exited with {proc.returncode} before answering")
    finally:
        proc.terminate()
        proc.wait()


def site_packages_mib(python: str) -> float:
    """The installed size of ``python``'s environment: its site-packages, in MiB."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    path = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    out = subprocess.run(["du", "-sk", path], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0]) / 1024


def ernie_ft_export(work: str) -> str:
    """A nano classifier trained a few steps from scratch with the ERNIE 3.0 vocabulary, exported to int8 ONNX."""
    run, out = os.path.join(work, "run"), os.path.join(work, "int8")
    train = [sys.executable, "-m", "ernie_ft", "classify", "--train", os.path.join(ROOT, "data", "sentiment_train.tsv"),
             "--model", "scratch:nano", "--vocab", VOCAB, "--epochs", "1", "--output", run, "--overwrite"]  # fmt: skip
    subprocess.run(train, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    export = [sys.executable, "-m", "ernie_ft", "export", "--model", run, "--output", out, "--format", "onnx",
              "--quantize", "int8", "--overwrite"]  # fmt: skip
    subprocess.run(export, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--torch-python", required=True, help="python of a venv with torch, transformers, optimum-onnx")
    default_runtime = os.path.join(ROOT, ".venv-runtime", "bin", "python")
    p.add_argument("--runtime-python", default=default_runtime if os.path.exists(default_runtime) else None,
                   help="python of a runtime install (pip install ernie_ft, no Paddle)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work", help="where the models go (default: a temporary directory)")
    args = p.parse_args()
    print(cpu_line(), flush=True)
    work = args.work or tempfile.mkdtemp(prefix="bench_cold_start_")
    export = ernie_ft_export(work)
    peer = os.path.join(work, "peer")
    here = os.path.dirname(os.path.abspath(__file__))  # optimum_worker.py's model: bench_int8's peer, the same shape
    subprocess.run([args.torch_python, "-c", PEER_SETUP, VOCAB, peer, here], check=True, stderr=subprocess.DEVNULL)
    out = os.path.join(work, "answers.jsonl")
    predict = ["-m", "ernie_ft", "predict", "--model", export, "--input", TEXTS, "--output", out]
    stacks = {"ernie_ft full install": (sys.executable, predict)}
    if args.runtime_python:
        stacks = {"ernie_ft runtime": (args.runtime_python, predict), **stacks}
    stacks["transformers pipeline (PyTorch fp32)"] = (args.torch_python, ["-c", PIPELINE, f"{peer}/pt", TEXTS, out])
    stacks["optimum int8 (ONNX Runtime)"] = (args.torch_python, ["-c", OPTIMUM, f"{peer}/int8", TEXTS, out])
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    figures = {name: [] for name in stacks}
    for _ in range(args.rounds):
        for name, (python, command) in stacks.items():
            if os.path.exists(out):  # predict refuses to write over an output it did not start
                os.remove(out)
            figures[name].append(run_cold([python, *command], env))
    first = next(iter(stacks))
    base = statistics.median(s for s, _ in figures[first])
    load = os.getloadavg()[0]
    print(f"\n10 texts, {args.rounds} cold processes per stack (median; rounds), load {load:.1f} at the end")
    print(f"| stack | seconds to the last answer | x {first}'s | peak RSS (MiB) | installed (MiB) |")
    print("|---|---|---|---|---|")
    for name, values in figures.items():
        seconds = statistics.median(s for s, _ in values)
        rss = statistics.median(r for _, r in values)
        rounds = ", ".join(f"{s:.2f}" for s, _ in values)
        size = site_packages_mib(stacks[name][0])
        print(f"| {name} | {seconds:.2f} ({rounds}) | {seconds / base:.2f}x | {rss:.0f} | {size:,.0f} |")
    print(json.dumps(figures))
    with open(TEXTS, encoding="utf-8") as f:
        texts = f.read().splitlines()
    servers = {name: (python, []) for name, (python, _) in stacks.items() if name.startswith("ernie_ft")}
    for _ in range(args.rounds):
        for python, seconds in servers.values():
            seconds.append(serve_cold(python, export, texts, env))
    print("\nserve: seconds from start to the first answer to the 10 texts (median; rounds)")
    for name, (_, seconds) in servers.items():
        print(f"| {name} | {statistics.median(seconds):.2f} ({', '.join(f'{s:.2f}' for s in seconds)}) |")


if __name__ == "__main__":
    main()

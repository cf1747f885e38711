"""Serving throughput and latency: ``ernie_ft serve`` against a per-request FastAPI + PaddleNLP endpoint.

    python benchmarks/bench_serve.py [--clients 1 8 32 64] [--requests 400] [--time-limit 120] [--port 8900]
    python benchmarks/bench_serve.py --soak 600 --clients 8          # RSS and errors over 10 minutes
    python benchmarks/bench_serve.py --cut 120                       # reviews cut to one window: the same work

A nano-shape classifier (4 x 312, ernie-3.0-nano-zh's shape, ERNIE 3.0 vocabulary) is trained for a few
steps on ChnSentiCorp (the weights do not change the cost), then served four ways, one at a time, on the
loopback interface:

- ``ernie_ft serve`` with dynamic batching (``--max-batch-size 32 --max-wait-ms 5``; on a CPU each batch runs
  as forward passes of at most 16 windows),
- the same with one forward pass per batch (``--forward-batch-size 32``, the sub-batching's baseline),
- the same with batching off (``--max-batch-size 1``),
- the endpoint most users write: FastAPI calling PaddleNLP's ``ErnieForSequenceClassification`` and its
  tokenizer per request (a plain ``def`` route, so FastAPI runs it on its thread pool), same checkpoint,
  same max length.

For each number of concurrent clients a bounded load (``--requests`` in all, or ``--time-limit`` seconds)
sends ChnSentiCorp dev reviews, one per request, and reports requests/s, p50/p95/p99 latency, failures,
the server's forward-pass batch sizes (from ``/v1/stats``) and its peak RSS. Whole reviews give
``ernie_ft`` more work (it reads each review whole, in windows, where the baseline truncates at 128
tokens); ``--cut 120`` sends reviews short enough for one window in both.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from cpu import line as cpu_line
from cpu import paddle_environ

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("ERNIE_FT_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
MAX_LEN = 128


def reviews(n: int | None = None) -> list[str]:
    path = os.path.join(SHARED, "chnsenticorp", "dev.tsv")
    with open(path, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    texts = [row[-1] for row in rows if row and row[-1].strip()]
    return texts[:n] if n else texts


def train_model(out: str) -> str:
    train = os.path.join(out, "train.tsv")
    with open(os.path.join(SHARED, "chnsenticorp", "train.tsv"), encoding="utf-8") as f:
        lines = f.readlines()[:257]
    with open(train, "w", encoding="utf-8") as f:
        f.writelines(lines)
    model = os.path.join(out, "model")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "ernie_ft.classify",
            "--train",
            train,
            "--model",
            "scratch:nano",
            "--vocab",
            os.path.join(SHARED, "ernie-3.0-vocab", "vocab.txt"),
            "--max-len",
            str(MAX_LEN),
            "--epochs",
            "1",
            "--output",
            model,
        ],
        check=True,
        capture_output=True,
    )
    return os.path.join(model, "best")


BASELINE = """
import sys
import numpy as np
import paddle
from fastapi import FastAPI
from pydantic import BaseModel
from paddlenlp.transformers import ErnieForSequenceClassification, ErnieTokenizer

model_dir, port, device, max_len = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
paddle.set_device(device)
tokenizer = ErnieTokenizer.from_pretrained(model_dir)
model = ErnieForSequenceClassification.from_pretrained(model_dir)
model.eval()
app = FastAPI()


class Item(BaseModel):
    text: str


@app.post("/predict")
def predict(item: Item):
    encoded = tokenizer(item.text, max_length=max_len, truncation=True)
    with paddle.no_grad():
        logits = model(paddle.to_tensor([encoded["input_ids"]]), paddle.to_tensor([encoded["token_type_ids"]]))
    probs = paddle.nn.functional.softmax(logits, axis=-1).numpy()[0]
    return {"label": int(np.argmax(probs)), "probs": probs.tolist()}


@app.get("/readyz")
def readyz():
    return {"status": "ready"}


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process on a free loopback port, with its peak RSS sampled every 50 ms."""

    def __init__(self, command: list[str], log: str, env: dict | None = None):
        import psutil

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log, "w")
        command = [c.replace("{port}", str(self.port)) for c in command]
        self.proc = subprocess.Popen(
            command, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        self.process = psutil.Process(self.proc.pid)
        self.peak_rss = 0
        self.rss = []
        self.stop_sampling = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self):
        while not self.stop_sampling.wait(0.05):
            try:
                rss = self.process.memory_info().rss
            except Exception:
                return
            self.peak_rss = max(self.peak_rss, rss)
            self.rss.append((time.monotonic(), rss))

    def wait_ready(self, timeout=300):
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: see {self.log.name}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server not ready")

    def stop(self):
        self.stop_sampling.set()
        self.proc.terminate()
        self.proc.wait(60)
        self.log.close()


async def load(url: str, path: str, body, texts: list[str], clients: int, requests: int, time_limit: float):
    """``clients`` loops sending requests until ``requests`` in all or ``time_limit``: (latencies, failures, seconds).

    aiohttp rather than httpx: the generator shares the machine's cores with the server, so it should cost little.
    """
    import aiohttp

    latencies, failures = [], collections.Counter()
    sent = 0
    start = time.perf_counter()

    async def client(http):
        nonlocal sent
        while sent < requests and time.perf_counter() - start < time_limit:
            text = texts[sent % len(texts)]
            sent += 1
            t0 = time.perf_counter()
            try:
                async with http.post(url + path, json=body(text)) as response:
                    await response.read()
                    if response.status != 200:
                        failures[str(response.status)] += 1
                        continue
            except aiohttp.ClientError as e:
                failures[type(e).__name__] += 1
                continue
            latencies.append(time.perf_counter() - t0)

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return latencies, failures, time.perf_counter() - start


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))] if values else float("nan")


def run_level(server: Server, path: str, body, texts, clients: int, args) -> dict:
    import httpx

    before = httpx.get(server.url + "/v1/stats").json() if path == "/v1/predict" else None
    asyncio.run(load(server.url, path, body, texts[: clients * 2], min(clients, 4), clients * 2, 60))  # warm up
    if before is not None:
        before = httpx.get(server.url + "/v1/stats").json()
    latencies, failures, seconds = asyncio.run(
        load(server.url, path, body, texts, clients, args.requests, args.time_limit)
    )
    histogram = ""
    if before is not None:
        after = httpx.get(server.url + "/v1/stats").json()["batch_sizes"]
        counts = {int(k): v - before["batch_sizes"].get(k, 0) for k, v in after.items()}
        histogram = " ".join(f"{k}:{v}" for k, v in sorted(counts.items()) if v)
    return {
        "clients": clients,
        "requests": len(latencies),
        "rps": len(latencies) / seconds,
        "p50": 1000 * percentile(latencies, 50),
        "p95": 1000 * percentile(latencies, 95),
        "p99": 1000 * percentile(latencies, 99),
        "failed": sum(failures.values()),
        "why": dict(failures),
        "histogram": histogram,
        "peak_rss_mib": server.peak_rss / 2**20,
    }


def serve_command(model: str, engine: str, device: str) -> list[str]:
    """``ernie_ft serve`` on ``{port}``: exported first (``--export``: for Paddle Inference, ONNX Runtime or ONNX
    Runtime in int8), as deployments do, or dygraph."""
    return [
        sys.executable,
        "-m",
        "ernie_ft",
        "serve",
        "--model",
        model,
        "--port",
        "{port}",
        "--device",
        device,
        *(["--engine", "dygraph"] if engine == "dygraph" else ["--export", EXPORTS[engine]]),
    ]


EXPORTS = {"inference": "paddle", "onnx": "onnx", "int8": "int8"}


def stacks(model: str, tmp: str, engine: str, device: str) -> dict:
    serve = serve_command(model, engine, device)
    baseline = os.path.join(tmp, "baseline_server.py")
    with open(baseline, "w", encoding="utf-8") as f:
        f.write(BASELINE)
    env = paddle_environ()
    return {
        "ernie_ft serve (dynamic batching)": (
            serve + ["--max-batch-size", "32", "--max-wait-ms", "5"],
            "/v1/predict",
            lambda t: {"inputs": [{"text": t}]},
            env,
        ),
        "ernie_ft serve (dynamic batching, one pass per batch)": (
            serve + ["--max-batch-size", "32", "--max-wait-ms", "5", "--forward-batch-size", "32"],
            "/v1/predict",
            lambda t: {"inputs": [{"text": t}]},
            env,
        ),
        "ernie_ft serve (batch size 1)": (
            serve + ["--max-batch-size", "1", "--max-wait-ms", "0"],
            "/v1/predict",
            lambda t: {"inputs": [{"text": t}]},
            env,
        ),
        "FastAPI + PaddleNLP per request": (
            [sys.executable, baseline, model, "{port}", device, str(MAX_LEN)],
            "/predict",
            lambda t: {"text": t},
            env,
        ),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--requests", type=int, default=400, help="requests per level")
    p.add_argument("--time-limit", type=float, default=120, help="seconds per level at most")
    p.add_argument("--model", help="a classifier checkpoint (default: train a nano-shape one)")
    p.add_argument("--only", nargs="+", help="run only the stacks whose name contains one of these")
    p.add_argument(
        "--cut",
        type=int,
        help="send each review's first CUT characters (120: one window of 128 tokens, the same work for every server)",
    )
    p.add_argument(
        "--engine",
        default="int8",
        choices=("int8", "onnx", "inference", "dygraph"),
        help="ernie_ft's engine: int8 (the default), onnx and inference export the model first (serve --export int8, "
        "onnx, paddle), as deployments do",
    )
    p.add_argument(
        "--device",
        default="cpu",
        help="where both servers run the model: cpu, or gpu:N with paddlepaddle-gpu (--model-only stays on the CPU)",
    )
    p.add_argument("--soak", type=float, help="instead: this many seconds at --clients[0] against ernie_ft serve")
    p.add_argument(
        "--model-only",
        action="store_true",
        help="instead: the model's cost per window by batch size and engine, without HTTP (the ceiling "
        "dynamic batching can reach)",
    )
    p.add_argument(
        "--record",
        action="store_true",
        help="write the int8 server's ratio at 32 clients to benchmarks/results/serving.json (the chart's)",
    )
    args = p.parse_args()
    print(cpu_line(), flush=True)  # the CPU every row names
    texts = [text[: args.cut] for text in reviews()] if args.cut else reviews()
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or train_model(tmp)
        if args.soak:
            return soak(model, texts, args, tmp)
        if args.model_only:
            return model_only(model, texts[:160], tmp)
        print(
            f"nano-shape classifier, max length {MAX_LEN}, ernie_ft engine {args.engine}, "
            f"ChnSentiCorp dev reviews ({len(texts)}), "
            f"{args.requests} requests per level (at most {args.time_limit:.0f} s), loopback\n"
        )
        print(
            "| server | clients | requests/s | p50 ms | p95 ms | p99 ms | failed | forward batch sizes (size:count) "
            "| peak RSS MiB |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        results = {}
        for name, (command, path, body, env) in stacks(model, tmp, args.engine, args.device).items():
            if args.only and not any(part in name for part in args.only):
                continue
            server = Server(command, os.path.join(tmp, "server.log"), env)
            try:
                server.wait_ready()
                for clients in args.clients:
                    r = run_level(server, path, body, texts, clients, args)
                    results[(name, clients)] = r
                    print(
                        f"| {name} | {clients} | {r['rps']:.1f} | {r['p50']:.0f} | {r['p95']:.0f} | {r['p99']:.0f} | "
                        f"{r['failed']}{' ' + str(r['why']) if r['failed'] else ''} | {r['histogram']} | "
                        f"{r['peak_rss_mib']:.0f} |",
                        flush=True,
                    )
            finally:
                server.stop()
        base = "FastAPI + PaddleNLP per request"
        for clients in args.clients:
            ours, theirs = results.get(("ernie_ft serve (dynamic batching)", clients)), results.get((base, clients))
            if ours and theirs:
                print(
                    f"\n{clients} clients: dynamic batching / per-request baseline = "
                    f"{ours['rps'] / theirs['rps']:.2f}x throughput; "
                    f"p99 {ours['p99']:.0f} ms vs {theirs['p99']:.0f} ms",
                    end="",
                )
                if args.record and args.engine == "int8" and clients == 32:  # benchmarks/results.py
                    from results import record

                    comparison = "serving, int8 / FastAPI + PaddleNLP, 32 clients"
                    record("serving", comparison, None, [ours["rps"] / theirs["rps"]], "bench_serve.py")
        print()


def model_only(model: str, texts: list[str], tmp: str) -> None:
    """ms per window of ServedModel.logits at several batch sizes, dygraph, Paddle Inference and int8 ONNX Runtime,
    after a warm-up pass."""
    from ernie_ft.inference.export import export
    from ernie_ft.serving.model import ServedModel

    engines = {
        "dygraph": ServedModel(model, "dygraph", "cpu"),
        "inference": ServedModel(export(model, os.path.join(tmp, "exported"), overwrite=True), "inference", "cpu"),
        "onnxruntime-int8": ServedModel(
            export(model, os.path.join(tmp, "int8"), overwrite=True, format="onnx", quantize="int8"),
            "onnxruntime-int8",
            "cpu",
        ),
    }
    features = [f for text in texts for f in engines["dygraph"].prepare([{"text": text}])[1]]
    print(f"{len(texts)} reviews -> {len(features)} windows; ms per window (second pass over them)\n")
    print("| engine | " + " | ".join(f"batch {b}" for b in (1, 4, 8, 16, 32)) + " |")
    print("|---|---|---|---|---|---|")
    for name, served in engines.items():
        cells = []
        for batch in (1, 4, 8, 16, 32):
            for _ in range(2):  # the first pass meets new shapes (oneDNN caches per shape)
                start = time.perf_counter()
                for i in range(0, len(features), batch):
                    served.logits(features[i : i + batch], batch)
                seconds = time.perf_counter() - start
            cells.append(f"{1000 * seconds / len(features):.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def soak(model: str, texts: list[str], args, tmp: str) -> None:
    import httpx

    clients = args.clients[0]
    server = Server(serve_command(model, args.engine, args.device), os.path.join(tmp, "server.log"), paddle_environ())
    try:
        server.wait_ready()
        start, minute = time.monotonic(), []
        total, failed = 0, collections.Counter()
        print(f"soak: {clients} clients for {args.soak:.0f} s against ernie_ft serve (dynamic batching)\n")
        print("| minute | requests | failed | RSS MiB (end of minute) | p99 ms |")
        print("|---|---|---|---|---|")
        while time.monotonic() - start < args.soak:
            span = min(60.0, args.soak - (time.monotonic() - start))
            latencies, failures, _ = asyncio.run(
                load(server.url, "/v1/predict", lambda t: {"inputs": [{"text": t}]}, texts, clients, 10**9, span)
            )
            total += len(latencies)
            failed.update(failures)
            rss = server.process.memory_info().rss / 2**20
            minute.append(rss)
            print(
                f"| {len(minute)} | {len(latencies)} | {sum(failures.values())} | {rss:.0f} | "
                f"{1000 * percentile(latencies, 99):.0f} |",
                flush=True,
            )
        stats = httpx.get(server.url + "/v1/stats").json()
        print(
            f"\n{total} requests, {sum(failed.values())} failed {dict(failed)}; RSS first minute {minute[0]:.0f} MiB, "
            f"last {minute[-1]:.0f} MiB, peak {server.peak_rss / 2**20:.0f} MiB; "
            f"median RSS {statistics.median(minute):.0f} MiB; server counted {stats['requests']} requests"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()

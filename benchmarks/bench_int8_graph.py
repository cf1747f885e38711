"""int8 graphs alone, on identical batches: documents/s, and how far a text's probabilities move with its batch.

    python benchmarks/bench_int8_graph.py GRAPH... [--rounds 8] [--texts 400] [--threads 2]

Each GRAPH is an ONNX file, or an export directory (its ``model.int8.onnx``): e.g. ``export --quantize int8`` and
``--quantize int8-dynamic`` of one run, and optimum's int8 of the same shape (``bench_int8.py`` leaves it in
``WORK/hf/onnx-int8``). Every graph runs the same batches: --texts token sequences (ids drawn from the first 39,000
of the vocabulary, lengths log-normal around 100 clipped to 4-128, as ChnSentiCorp's reviews), 32 a batch sorted by
length, padded to the longest, with ernie_ft's session settings (threads blocking). The graphs take turns in each
round; the table gives each graph's median documents/s, the median of the per-round ratios to the first graph, and
the largest difference of a probability (softmax of the first output) between 32 texts of other lengths batched
together and each text alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from cpu import line as cpu_line


def sequences(count: int, seed: int = 0) -> list[np.ndarray]:
    """``count`` token sequences [CLS] ... [SEP] of review-like lengths."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.exp(rng.normal(np.log(100), 0.6, count)).astype(int) + 2, 4, 128)
    return [np.concatenate([[1], rng.integers(5, 39000, n - 2), [2]]) for n in lengths]


def padded(rows: list[np.ndarray]) -> np.ndarray:
    ids = np.zeros((len(rows), max(map(len, rows))), np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
    return ids


class Graph:
    """An ONNX Runtime session on one graph, fed the inputs it names (BERT's attention mask from the padding)."""

    def __init__(self, path: str, threads: int):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        path = os.path.join(path, "model.int8.onnx") if os.path.isdir(path) else path
        self.session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def probabilities(self, ids: np.ndarray) -> np.ndarray:
        every = {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": (ids != 0).astype(np.int64)}
        logits = self.session.run(None, {name: every[name] for name in self.inputs})[0]
        e = np.exp(logits - logits.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("graphs", nargs="+")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--texts", type=int, default=400)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(cpu_line(), flush=True)
    print(f"load average at the start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    rows = sequences(args.texts)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    batches = [padded([rows[i] for i in order[k : k + 32]]) for k in range(0, len(order), 32)]
    mixed = [rows[i] for i in np.random.default_rng(1).choice(len(rows), 32, replace=False)]
    graphs = {path: Graph(path, args.threads) for path in args.graphs}
    speeds = {path: [] for path in graphs}
    for graph in graphs.values():
        graph.probabilities(batches[len(batches) // 2])  # warm-up
    for _ in range(args.rounds):
        for path, graph in graphs.items():
            start = time.perf_counter()
            for batch in batches:
                graph.probabilities(batch)
            speeds[path].append(args.texts / (time.perf_counter() - start))
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print("| graph | documents/s (median) | x the first graph (per round) | largest probability moved by the batch |")
    print("|---|---|---|---|")
    first = speeds[args.graphs[0]]
    for path, graph in graphs.items():
        ratios = [a / b for a, b in zip(speeds[path], first)]
        together = graph.probabilities(padded(mixed))
        alone = np.concatenate([graph.probabilities(padded([row])) for row in mixed])
        print(
            f"| {path} | {statistics.median(speeds[path]):.0f} | {statistics.median(ratios):.2f} "
            f"({', '.join(f'{r:.2f}' for r in ratios)}) | {np.abs(together - alone).max():.1e} |"
        )


if __name__ == "__main__":
    main()

"""Training tokens/s of the relation extractor (GPLinker pointers) against a classifier on the same shape.

    python experiments/bench_relation_heads.py [--model scratch:tiny] [--classes 46] [--batch 16] [--length 64]
        [--pairs 30]

Both models are built as the trainer builds them (fused CPU kernels on) and trained in one process on the same
random batches, one step of each in turn, so load from other jobs falls on both alike: AdamW steps with the
relation task's own training output and loss (the targets and entity-pair cells built per batch as its collate
does: two entities and one relation per input) and with cross-entropy over ``--classes`` labels. Prints the CPU,
then the median tokens/s of each after 5 warm-up pairs, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
from cpu import line as cpu_line  # noqa: E402  (cpu.py: the CPU line every benchmark prints first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="scratch:tiny")
    parser.add_argument("--classes", type=int, default=46, help="relation classes; also the classifier's labels")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=64, help="tokens per input, [CLS] and [SEP] included")
    parser.add_argument("--pairs", type=int, default=30)
    args = parser.parse_args()
    print(cpu_line(), flush=True)  # the CPU every row names

    import numpy as np
    import paddle
    import paddle.nn.functional as F

    from ernie_ft.config import ModelConfig
    from ernie_ft.models import modeling
    from ernie_ft.models.fast_layers import enable_fast_kernels
    from ernie_ft.relation.task import Relation, training_targets
    from ernie_ft.text.pipeline import TextPipeline
    from ernie_ft.text.scratch import build_vocab, write_vocab

    paddle.seed(0)
    rng = np.random.default_rng(0)
    write_vocab(
        build_vocab(["的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动"]),
        "/tmp/bench_vocab.txt",
    )
    pipeline = TextPipeline("/tmp/bench_vocab.txt")
    config = ModelConfig(model=args.model)
    relation = modeling.build_model(
        config, "pointer", args.classes, pipeline, "ernie_ft.relation.model:ErnieForRelationExtraction"
    )
    classifier = modeling.build_model(config, "sequence", args.classes, pipeline)
    timings = {"relation": [], "classify": []}
    models = {}
    for name, net in (("relation", relation), ("classify", classifier)):
        enable_fast_kernels(net)
        net.train()
        models[name] = (net, paddle.optimizer.AdamW(learning_rate=1e-4, parameters=net.parameters()))
    heads, task = 2 + 2 * args.classes, Relation()
    # subject tokens 1..2, object 4..6, one relation of class 0: its head-head and tail-tail cells
    spans = [(0, 1, 2), (1, 4, 6), (2, 1, 4), (2 + args.classes, 2, 6)]
    for pair in range(args.pairs + 5):
        ids = rng.integers(5, pipeline.vocab_size, size=(args.batch, args.length))
        batch = {"input_ids": paddle.to_tensor(ids), "token_type_ids": paddle.zeros([args.batch, args.length], "int64")}
        targets = {
            k: paddle.to_tensor(v) for k, v in training_targets([spans] * args.batch, args.length, heads).items()
        }
        for name, (net, optimizer) in models.items():
            tic = time.perf_counter()
            if name == "relation":
                loss = task.loss(modeling.forward(net, {**batch, **targets}), targets)
            else:
                logits = modeling.forward(net, batch)
                loss = F.cross_entropy(logits, paddle.to_tensor(rng.integers(0, args.classes, size=(args.batch, 1))))
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
            if pair >= 5:
                timings[name].append(args.batch * args.length / (time.perf_counter() - tic))
    result = {name: round(statistics.median(values)) for name, values in timings.items()}
    result["relation / classify"] = round(result["relation"] / result["classify"], 3)
    print(
        json.dumps({"model": args.model, "classes": args.classes, "batch": args.batch, "length": args.length, **result})
    )


if __name__ == "__main__":
    main()

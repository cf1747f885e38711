"""Pretraining throughput of ernie_ft against HF transformers' BertForMaskedLM (PyTorch), side by side,
and what masked-position logits and the fused CPU kernels each give.

    python benchmarks/bench_pretrain.py [--shape tiny|nano] [--steps 20] [--warmup 3] [--threads 2] \
        [--rounds 1] [--torch-python PATH]

The batches are ernie_ft's own: a slice of ../shared/data/corpus packed into blocks of 128 with
the ERNIE 3.0 vocabulary, batch 32, whole-word masks of epoch 0 (``masking.mlm_batch``), written
to an .npz that every stack trains on, fp32, dropout 0.1, AdamW at lr 1e-4 (weight decay 0.01),
no clipping, no schedule. Rows:

- ernie_ft: ``python -m ernie_ft.pretrain`` itself on the same corpus and seed (its batches are
  the .npz's by construction; the data pipeline and masking are inside its step time);
- in-process variants of the same model on the .npz: logits at the masked positions only or over
  the whole sequence, with and without ``ernie_ft.kernels``;
- HF: ``BertForMaskedLM`` (labels -100 off the masked positions, the logits of every position, as
  its documentation trains it) in the torch venv of ../shared/bench.

Tokens/s count the real (non-pad) tokens of a step, median over the timed steps. With --rounds N
the stacks run in turn N times and each ratio is the median of the per-round ratios.
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
from cpu import paddle_environ

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("ERNIE_FT_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
VOCAB = os.path.join(SHARED, "ernie-3.0-vocab", "vocab.txt")
SHAPES = {"tiny": (2, 128, 2, 512), "nano": (4, 312, 12, 1248)}  # layers, hidden, heads, FFN
BATCH, MAX_LEN, SEED = 32, 128, 7

HF_SCRIPT = r"""
import copy, json, sys, time
import numpy as np, torch
from transformers import BertConfig, BertForMaskedLM, ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining
npz, layers, hidden, heads, ffn, vocab, threads, warmup, objective = sys.argv[1:10]
torch.set_num_threads(int(threads)); torch.manual_seed(0)
data = np.load(npz)
shape = dict(vocab_size=int(vocab), hidden_size=int(hidden), num_hidden_layers=int(layers),
             num_attention_heads=int(heads), intermediate_size=int(ffn), max_position_embeddings=2048,
             type_vocab_size=4, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
if objective == "mlm":
    model = BertForMaskedLM(BertConfig(**shape)); parameters = list(model.parameters())
else:  # ELECTRA as its HF classes train: a generator of a third of the layers sharing the embeddings
    model = ElectraForPreTraining(ElectraConfig(embedding_size=int(hidden), **shape))
    small = ElectraConfig(embedding_size=int(hidden), **{**shape, "num_hidden_layers": max(1, int(layers) // 3)})
    generator = ElectraForMaskedLM(small); generator.electra.embeddings = model.electra.embeddings
    generator.generator_lm_head.weight = model.electra.embeddings.word_embeddings.weight; generator.train()
    parameters = list({id(p): p for p in [*model.parameters(), *generator.parameters()]}.values())
model.train()
opt = torch.optim.AdamW(parameters, lr=1e-4, weight_decay=0.01)
rates = []
for step in range(int(data["steps"])):
    ids = torch.from_numpy(data[f"ids{step}"]); types = torch.from_numpy(data[f"types{step}"])
    positions = torch.from_numpy(data[f"positions{step}"]); mask = (ids != 0).long()
    labels = torch.full_like(ids, -100).view(-1)
    labels[positions] = torch.from_numpy(data[f"labels{step}"])
    tic = time.perf_counter()
    if objective == "mlm":
        loss = model(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=labels.view(ids.shape)).loss
    else:
        out = generator(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=labels.view(ids.shape))
        with torch.no_grad():
            original = ids.clone().view(-1); original[positions] = labels[positions]
            replaced = original.clone()
            probs = out.logits.view(-1, out.logits.shape[-1])[positions].softmax(-1)
            replaced[positions] = torch.multinomial(probs, 1).squeeze(-1)
        disc = model(input_ids=replaced.view(ids.shape), token_type_ids=types, attention_mask=mask,
                     labels=(replaced != original).long().view(ids.shape))
        loss = out.loss + 50 * disc.loss
    loss.backward(); opt.step(); opt.zero_grad(); loss.item()
    rates.append(int((ids != 0).sum()) / (time.perf_counter() - tic))
print(json.dumps({"tokens_per_s": float(np.median(rates[int(warmup):])), "torch": torch.__version__}))
"""


def corpus_slice(tmp: str, lines: int) -> str:
    path = os.path.join(tmp, "corpus.txt")
    with open(path, "w", encoding="utf-8") as out:
        for name in ("news_xwlb.txt", "review_shopping.txt"):
            with open(os.path.join(SHARED, "corpus", name), encoding="utf-8") as f:
                out.writelines(line for _, line in zip(range(lines), f))
    return path


def dump_batches(corpus: str, tmp: str, steps: int) -> str:
    """The first ``steps`` training batches ernie_ft draws from ``corpus`` (seed SEED, epoch 0) as an .npz."""
    import numpy as np

    from ernie_ft.data.batching import LengthGroupedSampler
    from ernie_ft.pretrain.blocks import cached_blocks
    from ernie_ft.pretrain.corpus import scan
    from ernie_ft.pretrain.task import Pretraining
    from ernie_ft.text.pipeline import TextPipeline

    pipeline, task = TextPipeline(VOCAB), Pretraining()
    blocks, _ = cached_blocks(scan(corpus, "--corpus"), pipeline, MAX_LEN, os.path.join(tmp, "cache"))
    batches = LengthGroupedSampler(blocks.lengths, BATCH, seed=SEED).batches(0)[:steps]
    arrays = {"steps": np.array(len(batches))}
    for step, indices in enumerate(batches):
        b = task.collate([blocks[i] for i in indices], pipeline, SEED, 0)
        arrays.update(
            {
                f"ids{step}": b["input_ids"],
                f"types{step}": b["token_type_ids"],
                f"positions{step}": b["masked_positions"],
                f"labels{step}": b["masked_labels"],
                f"weights{step}": b["masked_weights"],
            }
        )
    path = os.path.join(tmp, "batches.npz")
    np.savez(path, **arrays)
    return path


def in_process(npz: str, shape: str, threads: int, warmup: int, masked_only: bool, fused: bool) -> float:
    """Real tokens/s of the ERNIE MLM on the .npz batches in this process."""
    import numpy as np
    import paddle
    import paddle.nn.functional as F
    from paddlenlp.transformers import ErnieConfig, ErnieForMaskedLM

    from ernie_ft.models.fast_layers import enable_fast_kernels
    from ernie_ft.training import runtime

    runtime.set_threads(threads)
    paddle.seed(0)
    layers, hidden, heads, ffn = SHAPES[shape]
    vocab = sum(1 for _ in open(VOCAB, encoding="utf-8"))
    model = ErnieForMaskedLM(
        ErnieConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=ffn,
            type_vocab_size=4,
            max_position_embeddings=2048,
            use_task_id=False,
        )
    )
    if fused:
        enable_fast_kernels(model)
    model.train()
    opt = paddle.optimizer.AdamW(learning_rate=1e-4, parameters=model.parameters(), weight_decay=0.01)
    data = np.load(npz)
    rates = []
    for step in range(int(data["steps"])):
        ids, types = paddle.to_tensor(data[f"ids{step}"]), paddle.to_tensor(data[f"types{step}"])
        positions, labels = paddle.to_tensor(data[f"positions{step}"]), paddle.to_tensor(data[f"labels{step}"])
        tic = time.perf_counter()
        if masked_only:
            logits = model(input_ids=ids, token_type_ids=types, masked_positions=positions)
            loss = F.cross_entropy(logits, labels.unsqueeze(-1))
        else:  # every position's logits, the loss on the masked ones (as HF's labels=-100 does)
            logits = model(input_ids=ids, token_type_ids=types).reshape([-1, vocab])
            loss = F.cross_entropy(paddle.gather(logits, positions), labels.unsqueeze(-1))
        loss.backward()
        opt.step()
        opt.clear_grad()
        float(loss)
        rates.append(int((data[f"ids{step}"] != 0).sum()) / (time.perf_counter() - tic))
    return statistics.median(rates[warmup:])


def command_line(corpus: str, tmp: str, args, objective: str = "mlm") -> float:
    """Real tokens/s of ``python -m ernie_ft.pretrain`` on the corpus (same seed: the .npz's batches)."""
    out = os.path.join(tmp, f"run-{objective}")
    command = [
        sys.executable,
        "-m",
        "ernie_ft.pretrain",
        "--corpus",
        corpus,
        "--model",
        f"scratch:{args.shape}",
        "--vocab",
        VOCAB,
        "--max-len",
        str(MAX_LEN),
        "--batch-size",
        str(BATCH),
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
        "--seed",
        str(SEED),
        "--dev-fraction",
        "0",
        "--epochs",
        "1",
        "--stop-after-steps",
        str(args.steps),
        "--output",
        out,
        "--overwrite",
        "--objective",
        objective,
    ]
    env = {**os.environ, "ERNIE_FT_CACHE": os.path.join(tmp, "cache"), "OMP_NUM_THREADS": str(args.threads)}
    subprocess.run(command, check=True, env=env, capture_output=True, cwd=ROOT)
    with open(os.path.join(out, "train_log.jsonl")) as f:
        return statistics.median(json.loads(line)["tokens_per_s"] for line in f.readlines()[args.warmup :])


def hf(npz: str, args, objective: str = "mlm") -> float:
    layers, hidden, heads, ffn = SHAPES[args.shape]
    vocab = sum(1 for _ in open(VOCAB, encoding="utf-8"))
    out = subprocess.run(
        [
            args.torch_python,
            "-c",
            HF_SCRIPT,
            npz,
            str(layers),
            str(hidden),
            str(heads),
            str(ffn),
            str(vocab),
            str(args.threads),
            str(args.warmup),
            objective,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["tokens_per_s"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument(
        "--torch-python",
        default=os.environ.get("TORCH_PYTHON"),
        help="python of a venv with torch and transformers (see ../shared/bench/README.md)",
    )
    p.add_argument("--record", action="store_true", help="write the ratios to benchmarks/results/training.json")
    args = p.parse_args()
    print(cpu_line(), flush=True)  # the CPU every row names
    os.environ.update(paddle_environ(os.environ))
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = corpus_slice(tmp, 3000)
        npz = dump_batches(corpus, tmp, args.steps)
        for _ in range(args.rounds):
            r = {"ernie_ft (python -m ernie_ft.pretrain)": command_line(corpus, tmp, args)}
            for name, masked_only, fused in (
                ("masked-position logits, fused kernels", True, True),
                ("masked-position logits, Paddle's layers", True, False),
                ("every position's logits, fused kernels", False, True),
            ):
                r[name] = in_process(npz, args.shape, args.threads, args.warmup, masked_only, fused)
            if args.torch_python:
                r["HF BertForMaskedLM / PyTorch"] = hf(npz, args)
            r["ernie_ft --objective electra"] = command_line(corpus, tmp, args, "electra")
            if args.torch_python:
                r["HF ElectraForPreTraining + ElectraForMaskedLM / PyTorch"] = hf(npz, args, "electra")
            rounds.append(r)
    first = next(iter(rounds[0]))
    print(
        f"shape {args.shape}, batch {BATCH} x {MAX_LEN} packed blocks, whole-word masks, fp32, dropout 0.1, "
        f"{args.threads} threads; median over {args.steps - args.warmup} steps after {args.warmup}; "
        f"{args.rounds} round(s)\n"
    )
    print("| stack | real tokens/s | ernie_ft / this | per round |")
    print("|---|---|---|---|")
    for name in rounds[0]:  # ELECTRA rows against ernie_ft's ELECTRA, the rest against its MLM
        ours = "ernie_ft --objective electra" if "lectra" in name else first
        ratios = [r[ours] / r[name] for r in rounds]
        print(
            f"| {name} | {statistics.median(r[name] for r in rounds):.0f} | {statistics.median(ratios):.2f}x | "
            f"{' '.join(f'{x:.2f}' for x in ratios)} |"
        )
        if args.record and name.startswith("HF "):  # the chart's figures (benchmarks/results.py)
            from results import record

            objective, row = ("MLM", f"pretraining, {args.shape}")
            if "lectra" in name:
                objective, row = ("ELECTRA", "pretraining, the same with")
            record("training", f"pretraining, {objective} / HF PyTorch", row, ratios, "bench_pretrain.py")


if __name__ == "__main__":
    main()

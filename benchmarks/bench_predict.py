"""Prediction throughput, side by side: ernie_ft dygraph, the exported model on Paddle Inference, HF/PyTorch.

    python benchmarks/bench_predict.py [--shape nano] [--docs 1200] [--threads 2] [--rounds 1] \
        [--torch-python PATH]

The same texts (ChnSentiCorp dev from ../shared/data when present, else data/sentiment_dev.tsv),
tokenised once by ernie_ft's pipeline with the ERNIE 3.0 vocabulary, windows of at most
--max-len tokens, length-sorted batches of --batch-size. A randomly initialised model of the
shape is saved as a checkpoint, exported with ``python -m ernie_ft.export``'s code, and timed:

- PaddleNLP dygraph: the same model as built, under Paddle's default settings (no ernie_ft kernels)
- dygraph: the checkpoint loaded as ``predict`` loads it (CPU kernels of ``ernie_ft.kernels``),
  through ``modeling.compute_logits``
- inference: the same function on the exported model through Paddle Inference (oneDNN)
- hf-torch: ``transformers.BertForSequenceClassification`` of the same shape under
  ``torch.no_grad()`` on exactly the same padded batches, in the interpreter given by
  --torch-python (a venv with torch and transformers; see ../shared/bench/README.md)

Each engine runs once to warm up, then --repeats timed passes; the median is reported as
documents per second (model time only, tokenisation excluded: it is the same for all). With --rounds N
the engines run in turn N times, so that the machine's drift hits them alike: each ratio is taken within
a round, and the table gives the medians and every round's ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

from cpu import line as cpu_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("ERNIE_FT_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))

HF_SCRIPT = r"""
import json, statistics, sys, time
import numpy as np, torch
from transformers import BertConfig, BertForSequenceClassification
spec = json.loads(sys.argv[1])
torch.set_num_threads(spec["threads"])
torch.manual_seed(0)
model = BertForSequenceClassification(BertConfig(
    vocab_size=spec["vocab"], hidden_size=spec["hidden"], num_hidden_layers=spec["layers"],
    num_attention_heads=spec["heads"], intermediate_size=spec["ffn"], max_position_embeddings=2048,
    type_vocab_size=4, num_labels=2)).eval()
data = np.load(spec["batches"])
batches = [(torch.from_numpy(data[f"ids{i}"]), torch.from_numpy(data[f"types{i}"]))
           for i in range(len(data.files) // 2)]
times = []
with torch.no_grad():
    for run in range(spec["repeats"] + 1):
        tic = time.perf_counter()
        for ids, types in batches:
            model(input_ids=ids, token_type_ids=types, attention_mask=(ids != spec["pad"]).long()).logits.numpy()
        if run:
            times.append(time.perf_counter() - tic)
print(json.dumps({"seconds": statistics.median(times)}))
"""


def texts_and_vocab(docs: int) -> tuple[list[str], str | None]:
    from ernie_ft.data.readers import read_examples

    shared_dev = os.path.join(SHARED, "chnsenticorp", "dev.tsv")
    source = shared_dev if os.path.isfile(shared_dev) else os.path.join(ROOT, "data", "sentiment_dev.tsv")
    texts = [e.text for e in read_examples(source)]
    texts = (texts * (docs // len(texts) + 1))[:docs]
    vocab = os.path.join(SHARED, "ernie-3.0-vocab", "vocab.txt")
    return texts, vocab if os.path.isfile(vocab) else None


def timed(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        fn()
        times.append(time.perf_counter() - tic)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="nano", choices=("tiny", "nano"))
    p.add_argument("--docs", type=int, default=1200)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the engines in turn this many times; ratios are per round, then the median",
    )
    p.add_argument(
        "--torch-python",
        default=os.environ.get("TORCH_PYTHON"),
        help="python of a venv with torch and transformers (skipped when absent)",
    )
    p.add_argument("--record", action="store_true", help="write the ratio to benchmarks/results/training.json")
    args = p.parse_args()
    print(cpu_line(), flush=True)  # the CPU every row names

    import paddle

    from ernie_ft.classify.task import Classification
    from ernie_ft.config import DataConfig, ModelConfig, RunConfig
    from ernie_ft.data.readers import Example
    from ernie_ft.inference.export import export
    from ernie_ft.inference.predict import load_for_inference
    from ernie_ft.inference.static_graph import InferenceModel
    from ernie_ft.models import modeling
    from ernie_ft.models.modeling import compute_logits
    from ernie_ft.training import checkpoint, runtime
    from ernie_ft.training.quiet import quiet_process

    quiet_process()
    runtime.set_threads(args.threads)
    texts, vocab = texts_and_vocab(args.docs)
    data = DataConfig(max_len=args.max_len, cache_dir=tempfile.mkdtemp())
    model_cfg = ModelConfig(model=f"scratch:{args.shape}", vocab=vocab)
    pipeline = modeling.load_pipeline(model_cfg, data, lambda: texts)
    task = Classification()
    examples = [Example(text=t, text_pair=None, label="0", line=i + 1, source="bench") for i, t in enumerate(texts)]
    features = task.featurize(examples, pipeline.encode_many(texts), pipeline, ["0", "1"], data)
    paddle.seed(0)
    net = modeling.build_model(model_cfg, "sequence", 2, pipeline)
    net.eval()
    defaults = paddle.get_flags(["FLAGS_use_stride_kernel"])  # Paddle's, before load_for_inference changes them

    with tempfile.TemporaryDirectory() as tmp:
        run = RunConfig(data=data, model=model_cfg).to_dict()
        checkpoint.save_model(os.path.join(tmp, "ckpt"), net, pipeline, ["0", "1"], "classify", run)
        export(os.path.join(tmp, "ckpt"), os.path.join(tmp, "exported"))
        engine = InferenceModel(os.path.join(tmp, "exported"), "cpu", args.threads)
        loaded, _ = load_for_inference(os.path.join(tmp, "ckpt"), "cpu", {})  # what predict runs
        ours = paddle.get_flags(["FLAGS_use_stride_kernel"])  # as load_for_inference set them
        spec = hf_batches(features, pipeline, args, tmp) if args.torch_python else None
        rounds = []
        for _ in range(args.rounds):
            results = {}
            paddle.set_flags(defaults)
            results["PaddleNLP model, Paddle's defaults"] = timed(
                lambda: compute_logits(net, features, pipeline.pad_id, args.batch_size), args.repeats
            )
            paddle.set_flags(ours)
            runtime.set_threads(args.threads)
            results["ernie_ft dygraph"] = timed(
                lambda: compute_logits(loaded.model, features, pipeline.pad_id, args.batch_size), args.repeats
            )
            results["ernie_ft exported, Paddle Inference"] = timed(
                lambda: compute_logits(engine, features, pipeline.pad_id, args.batch_size), args.repeats
            )
            if spec:
                out = subprocess.run(
                    [args.torch_python, "-c", HF_SCRIPT, json.dumps(spec)],
                    capture_output=True,
                    text=True,
                    env={**os.environ, "OMP_NUM_THREADS": str(args.threads)},
                    check=True,
                )
                results["HF transformers / PyTorch eval"] = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
            rounds.append(results)

    tokens = sum(len(f["input_ids"]) for f in features)
    print(
        f"shape {args.shape}, {args.docs} documents ({len(features)} windows, {tokens} real tokens), max length "
        f"{args.max_len}, batch {args.batch_size}, {args.threads} threads, fp32; median of {args.repeats} passes; "
        f"{args.rounds} round(s), medians across rounds\n"
    )
    print("| engine | documents/s | vs ernie_ft dygraph | vs HF/PyTorch (per round) |")
    print("|---|---|---|---|")
    hf = "HF transformers / PyTorch eval"
    for name in rounds[0]:
        seconds = statistics.median(r[name] for r in rounds)
        dygraph = statistics.median(r["ernie_ft dygraph"] / r[name] for r in rounds)
        versus_hf = [r[hf] / r[name] for r in rounds] if hf in rounds[0] else []
        per_round = (
            f"{statistics.median(versus_hf):.2f}x ({', '.join(f'{x:.2f}' for x in versus_hf)})" if versus_hf else "n/a"
        )
        print(f"| {name} | {args.docs / seconds:.0f} | {dygraph:.2f}x | {per_round} |")
        if args.record and versus_hf and name == "ernie_ft exported, Paddle Inference":  # the chart's figure
            from results import record

            row = f"prediction, {args.shape}"
            record("training", "prediction, Paddle Inference / HF PyTorch", row, versus_hf, "bench_predict.py")


def hf_batches(features, pipeline, args, tmp) -> dict:
    """The HF script's spec: the same length-sorted padded batches, saved to ``tmp``, and the model's shape."""
    import numpy as np

    from ernie_ft.data.batching import LengthGroupedSampler, collate
    from ernie_ft.models import model_source

    sampler = LengthGroupedSampler([len(f["input_ids"]) for f in features], args.batch_size, shuffle=False)
    arrays = {}
    for i, indices in enumerate(sampler.batches()):
        batch = collate([features[j] for j in indices], pipeline.pad_id)
        arrays[f"ids{i}"], arrays[f"types{i}"] = batch["input_ids"], batch["token_type_ids"]
    np.savez(os.path.join(tmp, "batches.npz"), **arrays)
    shape = model_source.SCRATCH[args.shape]
    return {
        "threads": args.threads,
        "vocab": pipeline.vocab_size,
        "hidden": shape["hidden_size"],
        "layers": shape["num_hidden_layers"],
        "heads": shape["num_attention_heads"],
        "ffn": shape["intermediate_size"],
        "batches": os.path.join(tmp, "batches.npz"),
        "repeats": args.repeats,
        "pad": pipeline.pad_id,
    }


if __name__ == "__main__":
    main()

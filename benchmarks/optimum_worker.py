"""optimum's side of ``bench_int8.py``, run in the torch venv (torch, transformers, optimum-onnx, onnxruntime).

    PYTHON benchmarks/optimum_worker.py VOCAB TEXTS WORKDIR [--threads 2]

The model is ``../shared/bench/baseline_optimum_int8.py``'s: a nano-shape ``BertForSequenceClassification`` (4 x 312,
12 heads, FFN 1248, the ERNIE 3.0 vocabulary, random weights: speed does not depend on them), exported by optimum and
quantized by its dynamic int8 for AVX-512 VNNI (``AutoQuantizationConfig.avx512_vnni``, per-tensor). The texts
(one a line) are predicted as that baseline does: the fast tokenizer on batches of 32 sorted by length, dynamic
padding, max length 128, ONNX Runtime, the argmax. Start-up happens once; then each line ``go`` on standard input
runs one pass and prints a JSON line: documents/s, the seconds of tokenisation, the model (``session.run``) and
the answers, the process's CPU seconds, and how many labels agree with PyTorch fp32's.
"""

import argparse
import json
import os
import pathlib
import sys
import time


def nano_bert(vocab: str, work: pathlib.Path):
    """(tokenizer, model): the nano-shape ``BertForSequenceClassification`` with random weights (seed 0) and its fast
    tokenizer on the ERNIE 3.0 vocabulary ``vocab`` (repeated and blank lines renamed ``[unused_N]``), saved in
    ``work/pt``."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    work.mkdir(parents=True, exist_ok=True)
    seen, lines = set(), []
    for i, token in enumerate(pathlib.Path(vocab).read_text(encoding="utf-8").split("\n")[:-1]):
        lines.append(token if token not in seen and token.strip() else f"[unused_{i}]")
        seen.add(token)
    (work / "vocab.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab_file=str(work / "vocab.txt"))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(lines),
        hidden_size=312,
        num_hidden_layers=4,
        num_attention_heads=12,
        intermediate_size=1248,
        max_position_embeddings=512,
        num_labels=2,
    )
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(work / "pt", safe_serialization=True)
    tokenizer.save_pretrained(work / "pt")
    return tokenizer, model


def optimum_int8(work: pathlib.Path, out: str = "onnx-int8") -> pathlib.Path:
    """``work/pt`` exported by optimum (``work/onnx``) and quantized by its dynamic int8 for AVX-512 VNNI,
    per-tensor, into ``work/out``."""
    from optimum.onnxruntime import ORTModelForSequenceClassification, ORTQuantizer
    from optimum.onnxruntime.configuration import AutoQuantizationConfig

    ORTModelForSequenceClassification.from_pretrained(work / "pt", export=True).save_pretrained(work / "onnx")
    quantizer = ORTQuantizer.from_pretrained(work / "onnx")
    quantizer.quantize(
        save_dir=work / out,
        quantization_config=AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=False),
    )
    return work / out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("vocab")
    parser.add_argument("texts")
    parser.add_argument("work")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import numpy as np
    import onnxruntime as ort
    import torch

    torch.set_num_threads(args.threads)
    work = pathlib.Path(args.work)
    tokenizer, model = nano_bert(args.vocab, work)
    texts = [t for t in pathlib.Path(args.texts).read_text(encoding="utf-8").splitlines() if t.strip()]
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    batches = [[texts[i] for i in order[k : k + 32]] for k in range(0, len(order), 32)]
    with torch.no_grad():
        reference = []
        for batch in batches:
            encoded = tokenizer(batch, padding=True, truncation=True, max_length=128, return_tensors="pt")
            reference += model(**encoded).logits.argmax(-1).tolist()
    int8 = optimum_int8(work)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(next(int8.glob("*.onnx"))), options, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}

    def one_pass() -> dict:
        seconds = [0.0, 0.0, 0.0]
        labels = []
        cpu = time.process_time()
        for batch in batches:
            ticks = [time.perf_counter()]
            encoded = tokenizer(batch, padding=True, truncation=True, max_length=128, return_tensors="np")
            feed = {k: v.astype(np.int64) for k, v in encoded.items() if k in names}
            ticks.append(time.perf_counter())
            logits = session.run(None, feed)[0]
            ticks.append(time.perf_counter())
            labels += logits.argmax(-1).tolist()
            ticks.append(time.perf_counter())
            for step in range(3):
                seconds[step] += ticks[step + 1] - ticks[step]
        return {
            "docs_per_s": len(texts) / sum(seconds),
            "seconds": seconds,
            "cpu": time.process_time() - cpu,
            "agree_with_fp32": sum(a == b for a, b in zip(labels, reference)) / len(reference),
        }

    one_pass()  # warm-up
    print(json.dumps({"ready": True, "ort": ort.__version__}), flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        print(json.dumps(one_pass()), flush=True)


if __name__ == "__main__":
    main()

"""What Hugging Face transformers answers with a model directory: ids and outputs, as JSON on stdout.

Runs where torch and transformers are installed (never the project's venv), e.g. on a directory written by
``python -m ernie_ft export --format hf``:

    /work/venv-torch/bin/python benchmarks/baselines/hf_reference.py --model DIR --texts texts.json [--pairs]

``texts.json`` is a JSON list of strings (or of [question, context] pairs with --pairs). tests/test_hf.py runs it
when ERNIE_FT_TORCH_PYTHON names such a Python.
"""

from __future__ import annotations

import argparse
import json

import torch
import transformers as tf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--texts", required=True)
    parser.add_argument("--pairs", action="store_true", help="texts are [question, context] pairs")
    args = parser.parse_args()
    with open(args.texts, encoding="utf-8") as f:
        texts = json.load(f)
    tokenizer = tf.AutoTokenizer.from_pretrained(args.model)
    config = tf.AutoConfig.from_pretrained(args.model)
    architecture = config.architectures[0]
    model = getattr(tf, architecture).from_pretrained(args.model).eval()
    if args.pairs:
        batch = tokenizer(
            [q for q, _ in texts], [c for _, c in texts], padding=True, truncation=True, return_tensors="pt"
        )
    else:
        batch = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch)
    result = {
        "architecture": architecture,
        "tokenizer": type(tokenizer).__name__,
        "input_ids": batch["input_ids"].tolist(),
        "attention_mask": batch["attention_mask"].tolist(),
        "id2label": {str(k): v for k, v in config.id2label.items()},
    }
    if hasattr(out, "start_logits"):
        result.update(start_logits=out.start_logits.tolist(), end_logits=out.end_logits.tolist())
    else:
        result["logits"] = out.logits.tolist()
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()

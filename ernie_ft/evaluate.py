"""Score a checkpoint on a labelled file: ``python -m ernie_ft.evaluate --model DIR --input FILE``.

Prints the metrics papers report (for classification: accuracy, macro and per-class
precision/recall/F1) and writes pictures and a metrics file to ``--output-dir``.
"""
from __future__ import annotations

import json
import os
import sys


def evaluate(args) -> dict:
    from .predict import load_for_inference, run_inference

    loaded, data = load_for_inference(args.model, args.device, {
        "text_column": args.text_column, "text_pair_column": args.text_pair_column,
        "label_column": args.label_column, "allow_new_labels": args.allow_new_labels or None}, args.engine,
        args.trust_pickle)
    examples, features, logits = run_inference(loaded, data, args.input, "--input", True, args.batch_size)
    metrics = loaded.task.evaluate(logits, features, examples, loaded.labels, data)
    from .checkpoint import resolve_model_dir

    run_dir = os.path.dirname(os.path.abspath(resolve_model_dir(args.model)))
    out_dir = args.output_dir or os.path.join(run_dir, "eval-" + os.path.splitext(os.path.basename(args.input))[0])
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(metrics, f, ensure_ascii=False, indent=1)
    print(f"{args.input}: {len(examples)} examples")
    if hasattr(loaded.task, "report"):
        print(loaded.task.report(logits, features, examples, loaded.labels, data, out_dir))
    else:
        print(" ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float)))
    print(f"metrics: {os.path.join(out_dir, 'metrics.json')}")
    return metrics


if __name__ == "__main__":
    from ernie_ft.cli import main

    sys.exit(main(["evaluate", *sys.argv[1:]], "python -m ernie_ft.evaluate"))

"""Score a checkpoint on a labelled file: ``python -m ernie_ft.evaluate --model DIR --input FILE``.

Prints the metrics papers report (for classification: accuracy, macro and per-class
precision/recall/F1) and writes pictures and a metrics file to ``--output-dir``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from .cli import Parser, quiet_imports, run_guarded


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m ernie_ft.evaluate", description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--model", required=True, help="checkpoint directory (a run's OUTPUT or OUTPUT/best)")
    p.add_argument("--input", required=True, help="labelled TSV, CSV or JSONL file (qa: SQuAD-style JSON or JSONL)")
    p.add_argument("--output-dir", help="where to write metrics and pictures (default: eval-<input name>/ in the "
                                        "run's directory)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--text-column"), p.add_argument("--text-pair-column"), p.add_argument("--label-column")
    p.add_argument("--allow-new-labels", action="store_true", help="score labels unknown to the model as errors")
    p.add_argument("--device", default="auto")
    p.add_argument("--engine", default="dygraph", choices=("dygraph", "inference"),
                   help="inference: score the model exported by python -m ernie_ft.export with Paddle Inference")
    return p


def evaluate(args) -> dict:
    from .predict import load_for_inference, run_inference

    loaded, data = load_for_inference(args.model, args.device, {
        "text_column": args.text_column, "text_pair_column": args.text_pair_column,
        "label_column": args.label_column, "allow_new_labels": args.allow_new_labels or None}, args.engine)
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


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    quiet_imports()
    return run_guarded(lambda: evaluate(args))


if __name__ == "__main__":
    sys.exit(main())

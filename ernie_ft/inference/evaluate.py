"""Score a checkpoint on a labelled file: ``python -m ernie_ft.evaluate --model DIR --input FILE``.

Prints the metrics papers report (for classification: accuracy, macro and per-class
precision/recall/F1) and writes pictures and a metrics file to ``--output-dir``.
"""

from __future__ import annotations

import itertools
import json
import os

SOURCE = "source.json"
"""In each evaluation directory: the checkpoint and the input file it scored (absolute paths)."""


def default_output_dir(run_dir: str, source: dict) -> str:
    """``eval-<input name>/`` in the run's directory, or ``eval-<input name>-2/``, ``-3/``, ... when that holds
    the evaluation of another checkpoint of the run or of another file of the same name: a default never
    replaces a different evaluation, and scoring the same checkpoint on the same file again reuses its directory."""
    stem = "eval-" + os.path.splitext(os.path.basename(source["input"]))[0]
    for n in itertools.count(1):
        out = os.path.join(run_dir, stem if n == 1 else f"{stem}-{n}")
        if not os.path.exists(out) or _source(out) == source:
            return out


def _source(out_dir: str):
    try:
        with open(os.path.join(out_dir, SOURCE), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):  # a directory from before source.json, or not ours: leave it alone
        return None


def evaluate(args) -> dict:
    from ernie_ft.inference.predict import load_for_inference, run_inference

    loaded, data = load_for_inference(
        args.model,
        args.device,
        {
            "text_column": args.text_column,
            "text_pair_column": args.text_pair_column,
            "label_column": args.label_column,
            "allow_new_labels": args.allow_new_labels or None,
        },
        args.engine,
        args.trust_pickle,
    )
    examples, features, logits = run_inference(loaded, data, args.input, "--input", True, args.batch_size)
    metrics = loaded.task.evaluate(logits, features, examples, loaded.labels, data)
    from ernie_ft.training.checkpoint import resolve_model_dir

    model_dir = os.path.abspath(resolve_model_dir(args.model))
    source = {"model": model_dir, "input": os.path.abspath(args.input)}
    out_dir = args.output_dir or default_output_dir(os.path.dirname(model_dir), source)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(metrics, f, ensure_ascii=False, indent=1)
    with open(os.path.join(out_dir, SOURCE), "w", encoding="utf-8") as f:
        json.dump(source, f, ensure_ascii=False, indent=1)
    print(f"{args.input}: {len(examples)} examples")
    if hasattr(loaded.task, "report"):
        print(loaded.task.report(logits, features, examples, loaded.labels, data, out_dir))
    else:
        print(" ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float)))
    print(f"metrics: {os.path.join(out_dir, 'metrics.json')}")
    return metrics

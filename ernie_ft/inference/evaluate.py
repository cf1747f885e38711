"""Score a checkpoint on a labelled file: ``python -m ernie_ft.evaluate --model DIR --input FILE``.

Prints the metrics papers report (for classification: accuracy, macro and per-class
precision/recall/F1) and writes pictures and a metrics file to ``--output-dir``.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from ernie_ft.models.model_dir import ModelDir

SOURCE = "source.json"
"""In each evaluation directory: the checkpoint and the input file it scored (absolute paths)."""


def evaluation_home(model_dir: str | ModelDir) -> str:
    """Where ``evaluate``'s default directories go for the checkpoint ``model_dir`` (a path, or a ``ModelDir``
    already read): inside it when it is an export (a Paddle Inference graph, ONNX, or a transformers directory,
    which records no ernie_ft run), so that its evaluations travel with it; else in the directory of the run it
    belongs to (``run/`` for ``run/best``)."""
    from ernie_ft.models.model_dir import as_model_dir

    source = as_model_dir(model_dir)
    home = os.path.abspath(source.path)
    return home if source.exported or source.run is None else os.path.dirname(home)


def default_output_dir(run_dir: str, source: dict) -> str:
    """``eval-<input name>/`` in ``run_dir`` (``evaluation_home``), or ``eval-<input name>-2/``, ``-3/``, ... when
    that holds the evaluation of another checkpoint or of another file of the same name: a default never
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


@dataclass(frozen=True)
class EvaluateOptions:
    """What ``evaluate`` scores: the command line's flags as values."""

    model: str
    """Checkpoint directory: a run's output directory or its best/, or an export."""
    input: str
    """Labelled file, in any format the checkpoint's task reads."""
    output_dir: Optional[str] = None
    """Where metrics and pictures go; None: ``default_output_dir`` in ``evaluation_home``."""
    batch_size: int = 64
    """Inputs per forward pass."""
    text_column: Optional[str] = None
    """Column or key with the text; None: as in training."""
    text_pair_column: Optional[str] = None
    """Column or key with the second text; None: as in training."""
    label_column: Optional[str] = None
    """Column or key with the label; None: as in training."""
    allow_new_labels: bool = False
    """Score labels unknown to the model as errors instead of refusing the file."""
    device: str = "auto"
    """cpu, gpu, gpu:N or auto."""
    engine: str = "auto"
    """One of ``inference.ENGINES``."""
    threshold: Optional[float] = None
    """A probability to decide with instead of the model's threshold (``TaskHooks.use_threshold``); None: its own."""
    trust_pickle: bool = False
    """Allow weights stored as a pickle (``weights.weights_format``)."""
    task: Optional[str] = None
    """A task spec that replaces the one the checkpoint recorded (``checkpoint.checkpoint_task``)."""


def evaluate(options: EvaluateOptions) -> dict:
    """Score the checkpoint on the labelled input: print the task's report, write ``metrics.json`` and the
    report's pictures to the output directory; returns the metrics."""
    from ernie_ft.inference.predict import engine_line, load_for_inference, resolve_engine, run_inference
    from ernie_ft.training.checkpoint import checkpoint_dir

    source = checkpoint_dir(options.model)  # the directory's one reading
    engine = resolve_engine(source, options.engine)
    loaded, data = load_for_inference(
        source,
        options.device,
        {
            "text_column": options.text_column,
            "text_pair_column": options.text_pair_column,
            "label_column": options.label_column,
            "allow_new_labels": options.allow_new_labels or None,
        },
        engine,
        options.trust_pickle,
        options.task,
        options.threshold,
    )
    examples, features, logits = run_inference(loaded, data, options.input, "--input", True, options.batch_size)
    metrics = loaded.task.evaluate(logits, features, examples, loaded.labels, data)
    model_dir = os.path.abspath(loaded.directory)
    where = {"model": model_dir, "input": os.path.abspath(options.input)}
    out_dir = options.output_dir or default_output_dir(evaluation_home(loaded.source), where)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(metrics, f, ensure_ascii=False, indent=1)
    with open(os.path.join(out_dir, SOURCE), "w", encoding="utf-8") as f:
        json.dump(where, f, ensure_ascii=False, indent=1)
    print(f"{options.input}: {len(examples)} examples; {engine_line(engine)}")
    report = loaded.task.report(logits, features, examples, loaded.labels, data, out_dir)
    print(
        report if report is not None else " ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))
    )
    print(f"metrics: {os.path.join(out_dir, 'metrics.json')}")
    return metrics

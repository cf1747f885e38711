"""Score a checkpoint on a labelled file: ``python -m ernie_ft.evaluate --model DIR --input FILE``.

Prints the metrics papers report (for classification: accuracy, macro and per-class
precision/recall/F1) and writes pictures and a metrics file to ``--output``, by default beside the input.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from dataclasses import dataclass
from typing import Optional

from ernie_ft.errors import UserError

SOURCE = "source.json"
"""In each evaluation directory: the checkpoint and the input file it scored (absolute paths)."""


def default_output_dir(source: dict) -> str:
    """``eval-<input name>/`` beside the input file (``source["input"]``, absolute), or ``eval-<input name>-2/``,
    ``-3/``, ... when that holds the evaluation of another checkpoint: a default never replaces a different
    evaluation, and scoring the same checkpoint on the same file again reuses its directory. Never inside the model
    directory: an export or a checkpoint is shared and served as it is."""
    stem = "eval-" + os.path.splitext(os.path.basename(source["input"]))[0]
    for n in itertools.count(1):
        out = os.path.join(os.path.dirname(source["input"]), stem if n == 1 else f"{stem}-{n}")
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
    """Where metrics and pictures go (``--output``); None: ``default_output_dir``, beside the input."""
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
    chunk_size: int = 512
    """Records read, run and scored at a time where the input streams (``inference.evaluate_stream``): memory
    follows it, not the input."""


def evaluate(options: EvaluateOptions) -> dict:
    """Score the checkpoint on the labelled input: print the task's report, write ``metrics.json`` and the
    report's pictures to the output directory; returns the metrics. The input is read in chunks where the task's
    metrics have a streamed form (``evaluate_stream``), else whole, with a note on standard error saying why."""
    from ernie_ft.inference.evaluate_stream import labelled_chunks, score_chunks
    from ernie_ft.inference.predict import engine_line, load_for_inference, resolve_engine
    from ernie_ft.inference.stream import device_name
    from ernie_ft.training.checkpoint import checkpoint_dir

    if options.chunk_size < 1:
        raise UserError(f"--chunk-size must be 1 or more, not {options.chunk_size}")
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
    print(f"evaluate: {engine_line(engine)} on {device_name()}", file=sys.stderr)
    model_dir = os.path.abspath(loaded.directory)
    where = {"model": model_dir, "input": os.path.abspath(options.input)}
    out_dir = options.output_dir or default_output_dir(where)
    tally = loaded.task.tally(loaded.labels, data, out_dir)
    chunks, why = labelled_chunks(loaded, data, options.input, options.chunk_size, tally)
    if chunks is None:
        print(f"note: --input {options.input} is read whole: {why}", file=sys.stderr)
        count, metrics, report = evaluate_whole(loaded, data, options, out_dir, where)
    else:
        made = not os.path.isdir(out_dir)
        make_output(out_dir, options)  # errors.txt is written as the chunks are scored
        try:
            scored = score_chunks(loaded, data, chunks, tally, options.batch_size)
        except BaseException:
            if made and not os.listdir(out_dir):  # a bad record, or a stop: no empty directory left behind
                os.rmdir(out_dir)
            raise
        count, metrics = scored.count, scored.metrics()
        write_metrics(out_dir, metrics, where)
        report = scored.report(out_dir)
    print(f"{options.input}: {count} examples; {engine_line(engine)}")
    print(
        report if report is not None else " ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))
    )
    print(f"metrics: {os.path.join(out_dir, 'metrics.json')}")
    return metrics


def evaluate_whole(
    loaded, data, options: EvaluateOptions, out_dir: str, where: dict
) -> tuple[int, dict, Optional[str]]:
    """(examples, metrics, the task's report) of the input read whole: every example, feature and logit at once."""
    from ernie_ft.inference.predict import run_inference

    examples, features, logits = run_inference(loaded, data, options.input, "--input", True, options.batch_size)
    metrics = loaded.task.evaluate(logits, features, examples, loaded.labels, data)
    make_output(out_dir, options)
    write_metrics(out_dir, metrics, where)
    return len(examples), metrics, loaded.task.report(logits, features, examples, loaded.labels, data, out_dir)


def make_output(out_dir: str, options: EvaluateOptions) -> None:
    """``out_dir`` made; a directory that cannot be made (the input's is read-only) is a UserError naming the flag."""
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        where = "--output" if options.output_dir else f"the default, beside --input {options.input}"
        message = f"cannot write the evaluation to {out_dir} ({where}): {e.strerror}; give --output DIR"
        raise UserError(message) from None


def write_metrics(out_dir: str, metrics: dict, where: dict) -> None:
    """``metrics.json`` and ``source.json`` (the checkpoint and the input it scored) in ``out_dir``."""
    with open(os.path.join(out_dir, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(metrics, f, ensure_ascii=False, indent=1)
    with open(os.path.join(out_dir, SOURCE), "w", encoding="utf-8") as f:
        json.dump(where, f, ensure_ascii=False, indent=1)

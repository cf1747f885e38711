"""What a run tells the person watching it: console progress, JSONL logs, VisualDL, curves."""

from __future__ import annotations

import json
import os
import sys
import time

from ernie_ft.config import SCRATCH_LR


def _fmt_metrics(metrics: dict) -> str:
    return " ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))


def collapsed(metrics: dict) -> str | None:
    """What an evaluation's predictions collapsed to, or None: classification metrics (``per_class``) where every
    text got one label (the others, present in the split, never predicted) or where labels present in the split
    were never predicted right (F1 0), NER metrics with no entity predicted (``predicted`` 0, ``f1`` 0) where the
    split has some, relation metrics with no triple predicted or none of them right."""
    per_class = metrics.get("per_class")
    if isinstance(per_class, dict):
        keys = {"precision", "recall", "support"}
        rows = {k: v for k, v in per_class.items() if isinstance(v, dict) and keys <= set(v)}
        present = [k for k, v in rows.items() if v["support"] > 0]
        total = sum(v["support"] for v in rows.values())
        for label, row in rows.items():  # predicted count = true positives / precision = support / precision
            alone = len(present) > 1 and all(rows[k]["recall"] == 0 for k in present if k != label)
            every = row["precision"] > 0 and round(row["support"] / row["precision"]) == total
            if alone and every and row["recall"] == 1:
                return f"every text got the label {label!r} (the model does not tell the labels apart yet)"
        missed = [k for k in present if rows[k]["recall"] == 0]
        if missed:
            shown = ", ".join(missed[:5]) + (", ..." if len(missed) > 5 else "")
            return (
                f"{len(missed)} of the {len(present)} labels in the split were never predicted right (F1 0: "
                f"{shown}; the model has not learnt them yet)"
            )
        return None
    if metrics.get("predicted") == 0 and metrics.get("f1") == 0 and metrics.get("support", 0) > 0:
        return "no entity was predicted (the model finds none yet)"
    if metrics.get("triple_f1") == 0 and metrics.get("gold_triples", 0) > 0:
        lower = "" if "threshold" in metrics else "; --tune-thresholds lets dev choose a lower --threshold"
        if metrics.get("predicted_triples") == 0:
            return f"no triple was predicted (the model finds none yet{lower})"
        return f"none of the {metrics['predicted_triples']} predicted triples is right (triple F1 0{lower})"
    return None


def collapse_advice(lr: float, scratch: bool, class_weights: bool) -> str:
    """What to try when predictions collapse, for a run at ``lr`` of a randomly initialised (``scratch``) or
    pretrained model; ``class_weights``: the task takes --class-weights."""
    higher = f"{max(2 * lr, SCRATCH_LR):.0e}".replace("e-0", "e-")
    tries = (
        [f"a higher --lr (this run: {lr:.3g}; e.g. --lr {higher} for a randomly initialised model)"]
        if scratch
        else [f"another --lr (this run: {lr:.3g}; 2e-5 to 1e-4 usually suit a pretrained model)"]
    )
    tries.append("more --epochs")
    if scratch:
        tries.append("a pretrained --model (e.g. ernie-3.0-medium-zh)")
    if class_weights:
        tries.append("--class-weights balanced when one label dominates the training file")
    return "try " + ", ".join(tries[:-1]) + " or " + tries[-1]


class RunLog:
    """Writes ``train_log.jsonl`` (losses), ``evaluations.jsonl``, VisualDL scalars under ``vdl/``
    and, at the end, ``curves.png``. A progress bar on a terminal; plain lines otherwise."""

    def __init__(self, output: str, total_steps: int, start_step: int = 0, enabled: bool = True, advice: str = ""):
        """``advice``: what to try when an evaluation's predictions collapse (``collapse_advice``)."""
        self.enabled, self.advice, self.collapses, self.evaluations = enabled, advice, 0, 0
        if not enabled:  # data-parallel ranks other than 0 write nothing
            return
        from tqdm import tqdm
        from visualdl import LogWriter

        self.output = output
        self.total = total_steps
        self.writer = LogWriter(logdir=os.path.join(output, "vdl"))
        mode = "a" if start_step else "w"
        # line-buffered: a launched worker ends with os._exit (see worker.py), which flushes nothing
        self.train_file = open(os.path.join(output, "train_log.jsonl"), mode, encoding="utf-8", buffering=1)
        self.eval_file = open(os.path.join(output, "evaluations.jsonl"), mode, encoding="utf-8", buffering=1)
        self.bar = tqdm(
            total=total_steps, initial=start_step, unit="step", dynamic_ncols=True, disable=not sys.stderr.isatty()
        )
        self.start_step, self.started = start_step, time.perf_counter()

    def say(self, message: str) -> None:
        if not self.enabled:
            return
        self.bar.write(message, file=sys.stderr)

    def step(
        self, step: int, loss: float, lr: float, tokens_per_s: float, epoch: int, log: bool, seconds: float = 0.0
    ) -> None:
        if not self.enabled:
            return
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tokens_per_s:.0f}", epoch=epoch)
        if not log:
            return
        record = {
            "step": step,
            "epoch": epoch,
            "loss": loss,
            "lr": lr,
            "tokens_per_s": tokens_per_s,
            "step_seconds": seconds,
        }
        self.train_file.write(json.dumps(record) + "\n")
        self.train_file.flush()
        self.writer.add_scalar("train/loss", loss, step)
        self.writer.add_scalar("train/lr", lr, step)
        self.writer.add_scalar("train/tokens_per_s", tokens_per_s, step)
        if self.bar.disable:
            done = step - self.start_step
            eta = (time.perf_counter() - self.started) / max(done, 1) * (self.total - step)
            self.say(
                f"step {step}/{self.total} epoch {epoch} loss {loss:.4f} lr {lr:.2e} "
                f"tok/s {tokens_per_s:.0f} eta {eta / 60:.1f}m"
            )

    def evaluation(self, step: int, epoch: int, split: str, metrics: dict, best: bool = False) -> None:
        if not self.enabled:
            return
        scalars = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        self.eval_file.write(
            json.dumps({"step": step, "epoch": epoch, "split": split, **scalars}, ensure_ascii=False) + "\n"
        )
        self.eval_file.flush()
        for k, v in scalars.items():
            self.writer.add_scalar(f"{split}/{k}", v, step)
        self.say(f"{split} @ step {step}: {_fmt_metrics(scalars)}{'  (best)' if best else ''}")
        self.evaluations += split == "dev"
        what = collapsed(metrics)
        # a model from random weights often gives one label before it learns: the first dev evaluation is left
        # alone unless it is the last; the advice in full once, then a short line
        if what and (self.evaluations > 1 or step >= self.total or split != "dev"):
            self.collapses += 1
            advice = f"; if it stays so, {self.advice}" if self.collapses == 1 and self.advice else ""
            self.say(f"warning: {split} @ step {step}: {what}{advice}")

    def close(self, metric: str) -> str:
        """Finish the logs and draw the loss and dev-metric curves; returns the PNG path."""
        if not self.enabled:
            return None
        from ernie_ft.evaluation.plots import plot_training_curves

        self.bar.close()
        self.writer.close()
        self.train_file.close()
        self.eval_file.close()
        history = []
        for name in ("train_log.jsonl", "evaluations.jsonl"):
            with open(os.path.join(self.output, name), encoding="utf-8") as f:
                history += [json.loads(line) for line in f if line.strip()]
        history.sort(key=lambda r: r["step"])
        return plot_training_curves(history, os.path.join(self.output, "curves.png"), metric)

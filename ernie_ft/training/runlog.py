"""What a run tells the person watching it: console progress, JSONL logs, VisualDL, curves."""

from __future__ import annotations

import json
import os
import sys
import time


def _fmt_metrics(metrics: dict) -> str:
    return " ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))


class RunLog:
    """Writes ``train_log.jsonl`` (losses), ``evaluations.jsonl``, VisualDL scalars under ``vdl/``
    and, at the end, ``curves.png``. A progress bar on a terminal; plain lines otherwise."""

    def __init__(self, output: str, total_steps: int, start_step: int = 0, enabled: bool = True):
        self.enabled = enabled
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

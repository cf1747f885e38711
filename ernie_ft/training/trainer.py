"""The training loop: ``fit`` trains a ``Run`` (built by ``run.setup``), with evaluation and checkpoints inline.

Everything a resumed run needs is in ``Run.state`` (model, optimizer, schedule, loss scaler and
``Progress``), which ``resume_state.save_state`` writes and ``resume_state.load_state`` reads whole.
Which processes run, and how they split the work, is ``parallel.Parallel``'s business.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from typing import Callable, Optional

from ernie_ft import thresholds
from ernie_ft.config import RunConfig
from ernie_ft.data.batching import collate, padding_fraction
from ernie_ft.data.dataset import Split
from ernie_ft.errors import Interrupted, UserError
from ernie_ft.evaluation import lower_is_better
from ernie_ft.models.modeling import compute_logits, forward, task_batching, to_tensors
from ernie_ft.training import checkpoint, resume_state
from ernie_ft.training.lock import release_output
from ernie_ft.training.run import Run, setup

DevHook = Callable[[int, float, dict], bool]
"""``fit``'s ``on_dev``: (optimizer step, epochs trained, dev metrics) -> whether to stop the run there."""


def fit(run: Run, exiting: bool = False, on_dev: Optional[DevHook] = None) -> dict:
    """Train until the last epoch, early stopping, ``--stop-after-steps``, Ctrl-C or SIGTERM; returns the metrics
    of the best checkpoint ({} when stopped early with a resumable checkpoint).

    ``exiting``: the caller ends the process after a stop on a signal (a command), so the stop's signal handlers
    stay until it restores its own (``StopRequest.restore``); else they are restored as ``fit`` returns.
    ``on_dev(step, epochs, metrics)``: called after each dev evaluation with the optimizer step, the epochs trained
    (a fraction mid-epoch) and the dev metrics; True stops the run there as a stop request does (``last/`` saved,
    resumable): a hyperparameter search prunes a trial with it."""
    tc, p, log = run.cfg.train, run.progress, run.log
    stop = StopRequest()
    paused = stopping = halted = False
    if run.task.tunes_thresholds:
        if "dev" not in run.splits:
            raise UserError("--tune-thresholds needs dev examples to tune on: give --dev FILE or --dev-split FRACTION")
        log.say(thresholds.tuned_line(run.cfg.data.dev, len(run.splits["dev"].examples)))
    try:
        while p.epoch < tc.epochs and not paused:
            batches = run.sampler.batches(p.epoch)
            if p.batch == 0:
                log.say(
                    f"epoch {p.epoch + 1}/{tc.epochs}: {len(batches)} batches, "
                    f"padding {padding_fraction(batches, run.splits['train'].lengths):.1%}"
                )
            for first in range(p.batch, len(batches), tc.grad_accum):
                group = batches[first : first + tc.grad_accum]
                loss, tokens, seconds, skipped, stopping = train_step(run, group, stop)
                check_loss(run, loss, skipped)
                log.step(
                    p.step + 1,
                    loss,
                    run.state["optimizer"].get_lr(),
                    tokens / seconds,
                    p.epoch + 1,
                    log=(p.step + 1) % tc.log_steps == 0,
                    seconds=seconds,
                )
                p.step, p.batch = p.step + 1, first + len(group)
                end_of_epoch = p.batch == len(batches)
                if end_of_epoch:
                    p.epoch, p.batch = p.epoch + 1, 0
                if "dev" in run.splits and (
                    p.step == run.total_steps or (p.step % tc.eval_steps == 0 if tc.eval_steps else end_of_epoch)
                ):
                    metrics = evaluate_dev(run)
                    halted = on_dev is not None and on_dev(p.step, p.epoch + p.batch / len(batches), metrics)
                if tc.patience and p.bad_evals >= tc.patience:
                    log.say(f"early stop: no dev {metric_name(run)} improvement in {tc.patience} evaluations")
                    p.epoch = tc.epochs
                paused = stopping or halted or p.step == tc.stop_after_steps
                if end_of_epoch or paused or p.epoch == tc.epochs:
                    resume_state.save_state(os.path.join(tc.output, checkpoint.LAST), run.state, run.parallel)
                    break
        if p.epoch < tc.epochs:  # still under StopRequest: a repeated SIGTERM must not cut this short
            log.close(metric_name(run))
            print(
                f"stopped at step {p.step}/{run.total_steps}; a resumable checkpoint is in "
                f"{os.path.join(tc.output, checkpoint.LAST)}: run the same command with --resume to continue",
                file=sys.stderr,
            )
            if stopping:  # a peer's signal stops this rank too
                raise Interrupted(stop.signum or signal.SIGTERM)
            return {}
    finally:
        stop.restore(leaving=stopping and exiting)
    return finish(run)


def train_step(
    run: Run, group: list[list[int]], stop: Optional[StopRequest] = None
) -> tuple[float, int, float, bool, bool]:
    """One optimizer step over ``group`` (``--grad-accum`` batches): (mean loss over replicas, the job's
    tokens, seconds, whether the fp16 loss scaler skipped the update, whether any rank's ``stop`` was
    requested by the end of the step: the loss's reduction carries it, so every rank stops after the same step)."""
    tic = time.perf_counter()  # data, forward, backward, update (not evaluation)
    features, task = run.splits["train"].features, run.task
    precision, optimizer = run.precision, run.state["optimizer"]
    tokens = 0
    for indices in group:
        chosen = [features[i] for i in indices]
        batch = task.collate(chosen, run.pipeline, run.cfg.train.seed, run.progress.epoch)
        if batch is None:  # the usual dynamic padding
            batch = collate(chosen, run.pipeline.pad_id, task.head == "token")
        batch = run.parallel.distribute(to_tensors(batch), whole=task.flat_fields)
        with precision.autocast():
            loss = task.loss(forward(run.model, batch), batch)
        precision.backward(loss / len(group))
        tokens += sum(len(f["input_ids"]) for f in chosen)
    skipped = precision.step(optimizer)
    optimizer.clear_grad(set_to_zero=False)  # drop the gradients: the next backward writes fresh ones, not += 0
    run.state["scheduler"].step()
    loss, stopping = run.parallel.mean_and_any(loss, stop is not None and stop.requested)
    return loss, run.parallel.job_total(tokens), time.perf_counter() - tic, skipped, stopping


class NonFiniteLoss(UserError):
    """The training loss became NaN or infinite; nothing after the last good checkpoints was saved."""


def check_loss(run: Run, loss: float, skipped: bool) -> None:
    """Count a step the fp16 scaler skipped; stop the run at a non-finite loss otherwise, before
    anything of it is evaluated or saved, so best/ and last/ keep the last good weights."""
    p = run.progress
    if skipped:
        p.skipped_steps += 1
        run.log.say(
            f"step {p.step + 1}: fp16 gradients overflowed, the loss scaler skipped this update "
            f"({p.skipped_steps} skipped so far)"
        )
        return
    if math.isfinite(loss):
        return
    out = run.cfg.train.output
    kept = [f"{checkpoint.BEST}/ (step {p.best_step})" if p.best_step is not None else None]
    last_state = os.path.join(out, checkpoint.LAST, "trainer_state.json")
    if os.path.isfile(last_state):
        with open(last_state, encoding="utf-8") as f:
            kept.append(f"{checkpoint.LAST}/ (step {json.load(f)['step']}, resumable)")
    kept = [k for k in kept if k]
    raise NonFiniteLoss(
        f"step {p.step + 1}: the training loss is {loss} (not finite); stopped without saving "
        f"this step. {'Kept in ' + out + ': ' + ', '.join(kept) if kept else 'Nothing was saved yet'}. "
        "Lower --lr, keep --max-grad-norm on, or train without --amp fp16"
    )


def metric_name(run: Run) -> str:
    return run.cfg.train.metric or run.task.metric


def score(run: Run, split: Split, tune: bool = False) -> dict:
    """The task's metrics on ``split``: each example scored once across the job, every rank gets them. ``tune``
    (dev only): the task first chooses its thresholds on ``split`` (``TaskHooks.tune``), recorded in the metrics."""
    parallel, features = run.parallel, split.features
    mine = parallel.share(len(features))
    outputs = compute_logits(
        run.net,
        [features[i] for i in mine],
        run.pipeline.pad_id,
        2 * run.cfg.train.batch_size,
        run.precision,
        run.task.head,
        parallel,
        **task_batching(run.task, run.pipeline, run.cfg.train.seed),
    )
    logits = parallel.gather(mine, list(outputs))
    if run.task.head == "sequence":
        import numpy as np

        logits = np.stack(logits)
    tuned = run.task.tune(logits, features, split.examples, run.labels, run.cfg.data) if tune else {}
    return {**run.task.evaluate(logits, features, split.examples, run.labels, run.cfg.data), **tuned}


def evaluate_dev(run: Run) -> dict:
    """Score dev; a better score becomes ``best/``. Returns the dev metrics."""
    p, metric = run.progress, metric_name(run)
    metrics = score(run, run.splits["dev"], tune=run.task.tunes_thresholds)
    if metric not in metrics:
        raise UserError(
            f"--metric {metric}: the task reports {', '.join(k for k, v in metrics.items() if isinstance(v, float))}"
        )
    improved = p.best is None or (metrics[metric] < p.best if lower_is_better(metric) else metrics[metric] > p.best)
    if improved:
        p.best, p.best_step, p.bad_evals, p.dev = metrics[metric], p.step, 0, metrics
        save_best(run)
    else:
        p.bad_evals += 1
    run.log.evaluation(p.step, p.epoch, "dev", metrics, best=improved)
    return metrics


def save_best(run: Run) -> None:
    config = run.cfg.to_dict()
    config["task"] = {**config["task"], **run.task.learned_options(run.progress.dev)}
    checkpoint.save_model(
        os.path.join(run.cfg.train.output, checkpoint.BEST),
        run.net,
        run.pipeline,
        run.labels,
        run.task.name,
        {
            **config,
            "labels": run.labels,
            "inputs": trained_inputs(run.task, run.splits["train"].examples),
            "precision": run.precision.computes,  # what the weights were trained in, whatever --amp asked
        },
        run.parallel,
    )


def trained_inputs(task, examples) -> list[str]:
    """The task's input fields the training examples used, which the checkpoint records for the server's page: the
    required ones, and each optional one that some example held (a classifier's ``text_pair`` only after pairs); an
    optional field the examples have no attribute for is kept."""
    required, optional = task.input_fields
    used = [
        f
        for f in optional
        if not examples or not hasattr(examples[0], f) or any(getattr(e, f, None) is not None for e in examples)
    ]
    return [*required, *used]


def finish(run: Run) -> dict:
    """After the last step: score test with the best checkpoint, write metrics.json and the curves."""
    p, out = run.progress, run.cfg.train.output
    if "dev" not in run.splits:
        save_best(run)
    run.parallel.barrier()
    best_dir = os.path.join(out, checkpoint.BEST)
    results = {"dev": p.dev} if p.dev else {}
    if "test" in run.splits:
        checkpoint.load_weights(best_dir, run.net, run.parallel)
        run.task.learned_options(p.dev)  # the best checkpoint's (a resumed run may not have evaluated since)
        results["test"] = score(run, run.splits["test"])
        run.log.evaluation(p.best_step or p.step, p.epoch, "test", results["test"])
    if not run.parallel.is_main:
        return results
    with open(os.path.join(out, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False, indent=1)
    png = run.log.close(metric_name(run))
    print(
        f"done: best model in {best_dir}; metrics in {os.path.join(out, 'metrics.json')}; curves in {png}",
        file=sys.stderr,
    )
    for split, metrics in results.items():
        print(f"{split}: " + " ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float)))
    return results


def train(task, cfg: RunConfig, inputs: Optional[tuple[dict, list]] = None, on_dev: Optional[DevHook] = None) -> dict:
    """The training command: fine-tune ``task`` as configured; returns the metrics written to OUTPUT/metrics.json.
    ``inputs``: what ``check_inputs`` returned, when the caller checked them already; ``on_dev``: see ``fit``."""
    try:
        return fit(setup(task, cfg, inputs), exiting=True, on_dev=on_dev)
    finally:
        release_output(cfg.train.output or "")


class StopRequest:
    """Ctrl-C (SIGINT) or SIGTERM during training: finish the current step, save a resumable
    checkpoint and exit. A second Ctrl-C aborts at once; a repeated SIGTERM changes nothing (Paddle's
    launcher sends its workers up to three, a scheduler escalates with SIGKILL). ``after`` and ``abort`` word the
    line a signal prints (predict's stream stops after its batch); as a context manager it restores the handlers."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, after: str = "this step", abort: str = "abort without saving"):
        self.signum: Optional[int] = None
        self.after, self.abort = after, abort
        self.previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}

    def __enter__(self) -> StopRequest:
        return self

    def __exit__(self, *exc) -> None:
        self.restore()

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum, frame):
        if self.requested:
            if signum == signal.SIGINT:
                raise Interrupted(signum)
            return
        self.signum = signum
        again = f" (Ctrl-C again to {self.abort})" if signum == signal.SIGINT else ""
        print(f"\n{signal.Signals(signum).name}: stopping after {self.after}{again}", file=sys.stderr)

    def restore(self, leaving: bool = False):
        """Give the signals back to the handlers from before; not when ``leaving`` (the run stops on a signal,
        this rank's or a peer's): this rank's own SIGTERM or the launcher's repeats may still arrive on the way
        out, and the command's handler would raise them wherever the interpreter stands (inside a ``__del__``
        such an exception is only printed, with a traceback). The command restores its handlers at its end
        (``cli.run_guarded``)."""
        if leaving:
            self.signum = self.signum or signal.SIGTERM  # what arrives from now on is a repeat
            return
        for s, handler in self.previous.items():
            signal.signal(s, handler)

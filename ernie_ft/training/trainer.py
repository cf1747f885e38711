"""The training loop: ``setup`` builds a run, ``fit`` trains it, with evaluation and checkpoints inline.

Everything a resumed run needs is in ``Run.state`` (model, optimizer, schedule, loss scaler and
``Progress``), which ``checkpoint.save_state`` writes and ``checkpoint.load_state`` reads whole.
Which processes run, and how they split the work, is ``parallel.Parallel``'s business.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from ernie_ft.config import RunConfig, TrainConfig, learning_rate
from ernie_ft.data.batching import LengthGroupedSampler, collate, padding_fraction
from ernie_ft.data.dataset import Split, default_cache_dir, featurize, read_splits
from ernie_ft.errors import Interrupted, UserError
from ernie_ft.evaluation import lower_is_better
from ernie_ft.models import modeling
from ernie_ft.models.modeling import compute_logits, forward, task_batching, to_tensors
from ernie_ft.training import checkpoint
from ernie_ft.training.lock import release_output
from ernie_ft.training.runlog import RunLog, collapse_advice

if TYPE_CHECKING:  # runtime and parallel import Paddle: setup imports them once the inputs are checked
    from ernie_ft.training import runtime
    from ernie_ft.training.parallel import Parallel


@dataclass
class Progress:
    """Where training stands; saved as ``last/trainer_state.json``."""

    step: int = 0
    epoch: int = 0
    batch: int = 0
    """Batches of the current epoch already trained on."""
    best: Optional[float] = None
    best_step: Optional[int] = None
    bad_evals: int = 0
    """Evaluations since the best one (early stopping)."""
    dev: Optional[dict] = None
    """The best evaluation's metrics."""
    global_batch: int = 0
    skipped_steps: int = 0
    """fp16 steps the loss scaler skipped because the gradients overflowed."""


@dataclass
class Run:
    """A run ready to train: its data, model, optimizer and state."""

    task: Any
    cfg: RunConfig
    labels: list
    pipeline: Any
    splits: dict
    parallel: Parallel
    precision: runtime.Precision
    model: Any
    """As prepared for training (a DataParallel wrapper under plain data parallelism)."""
    sampler: LengthGroupedSampler
    total_steps: int
    state: dict
    """'model' (bare), 'optimizer', 'scheduler', 'precision' and 'progress': what last/ holds."""
    log: RunLog

    @property
    def progress(self) -> Progress:
        return self.state["progress"]

    @property
    def net(self):
        return self.state["model"]


def build_optimizer(model, tc: TrainConfig, scheduler):
    """AdamW following ``scheduler``; no weight decay on biases and LayerNorm."""
    import paddle

    decay = {p.name for n, p in model.named_parameters() if not any(s in n for s in ("bias", "norm"))}
    return paddle.optimizer.AdamW(
        learning_rate=scheduler,
        parameters=model.parameters(),
        weight_decay=tc.weight_decay,
        epsilon=tc.adam_epsilon,
        apply_decay_param_fun=lambda name: name in decay,
        grad_clip=paddle.nn.ClipGradByGlobalNorm(tc.max_grad_norm) if tc.max_grad_norm > 0 else None,
    )


def check_inputs(task, cfg: RunConfig) -> tuple[dict, list]:
    """Every split read and checked, and the output directory: (examples, labels). Paddle is not imported yet, so
    a wrong input fails at once."""
    if not cfg.train.output:
        raise UserError("--output is required (the directory for the model, metrics and logs)")
    if modeling.kind(cfg.model.model) == "scratch":
        modeling.scratch_config(cfg.model.model)
    examples, labels = read_splits(task, cfg.data)
    checkpoint.check_output(cfg.train.output, cfg.resume, cfg.overwrite)
    return examples, labels


def _datasets_first_warning(record) -> bool:
    """False for PaddleNLP's warning that ``datasets`` was imported before it (a logging filter)."""
    return "imported before paddlenlp" not in record.getMessage()


def setup(task, cfg: RunConfig, inputs: Optional[tuple[dict, list]] = None) -> Run:
    """Read and check the data (unless ``inputs`` holds what ``check_inputs`` returned), build the model and
    optimizer for this job's processes, and on ``--resume`` load the saved state. Nothing is written before the
    inputs and the model are checked; Paddle is imported once the inputs are."""
    examples, labels = check_inputs(task, cfg) if inputs is None else inputs
    import logging

    # reading a saved dataset imported ``datasets`` before PaddleNLP, which warns about its own downloads then
    logging.getLogger("PaddleNLP").addFilter(_datasets_first_warning)  # the same function: added once per process
    from ernie_ft.training import runtime
    from ernie_ft.training.parallel import Parallel

    runtime.quiet_libraries()
    base_lr, default_for = learning_rate(cfg)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, lr=base_lr))  # saved with the checkpoints
    data, tc = cfg.data, cfg.train
    parallel = Parallel(cfg.parallel.tensor_parallel)
    device = runtime.select_device(runtime.device_for(tc.device, cfg.parallel.gpus, parallel.size))
    # the cores of this node are shared by its own processes (the launcher's PADDLE_LOCAL_SIZE), not every node's
    threads = runtime.set_threads(tc.threads, int(os.environ.get("PADDLE_LOCAL_SIZE", parallel.size)))
    runtime.seed_everything(tc.seed)
    data = dataclasses.replace(data, cache_dir=data.cache_dir or default_cache_dir())
    model_dir = modeling.model_dir_of(cfg.model)  # --model read once, for the pipeline and the model
    pipeline = modeling.load_pipeline(
        cfg.model, data, lambda: task.texts(examples["train"]), task.exact_spans, model_dir
    )
    rules = checkpoint.resumed_rules(tc.output, parallel) if cfg.resume else None
    if rules is not None and rules != pipeline.rules:  # the ids the run started with, whatever today's default
        bert_only = {} if rules == "bert" else {"strip_accents": None, "tokenize_chinese_chars": True}
        pipeline = pipeline.replace(rules=rules, **bert_only)
    model = modeling.build_model(cfg.model, task.head, len(labels), pipeline, task.model_class, model_dir)
    task.bind(model)
    modeling.check_max_len(data, model, cfg.model.model)
    parallel.check_model(model)
    if parallel.is_main:
        # only now: nothing is lost on an error; a launched job's lock is the launcher's
        checkpoint.prepare_output(tc.output, cfg.resume, cfg.overwrite, lock=parallel.size == 1)
    parallel.barrier()
    runtime.seed_everything(tc.seed + parallel.dp_rank)  # same initial weights, different dropout per replica
    splits = {
        name: featurize(task, name, ex, pipeline, labels, data, audit_report=name == "train")
        for name, ex in examples.items()
    }

    sampler = LengthGroupedSampler(
        splits["train"].lengths, tc.batch_size, seed=tc.seed, num_replicas=parallel.dp, rank=parallel.data_rank
    )
    steps_per_epoch = math.ceil(len(sampler.batches(0)) / tc.grad_accum)
    total_steps = steps_per_epoch * tc.epochs
    lr = tc.lr * cfg.parallel.lr_factor(parallel.dp, tc.grad_accum)
    from paddlenlp.transformers import LinearDecayWithWarmup

    scheduler = LinearDecayWithWarmup(lr, total_steps, tc.warmup)
    precision = runtime.Precision(tc.amp, tc.amp_level)
    trained, optimizer = parallel.prepare(
        model, lambda net: build_optimizer(net, tc, scheduler), precision, tc.recompute
    )
    global_batch = tc.batch_size * parallel.dp
    state = {
        "model": parallel.unwrap(trained),
        "optimizer": optimizer,
        "scheduler": scheduler,
        "precision": precision,
        "progress": Progress(global_batch=global_batch),
    }
    if parallel.is_main:
        print(
            f"device {device}, {parallel.describe()}, {threads} threads each; "
            f"{f'{len(labels)} labels; ' if labels else ''}"
            f"{total_steps} steps ({tc.epochs} epochs x {steps_per_epoch}); global batch "
            f"{global_batch * tc.grad_accum} = {tc.batch_size} per replica x {parallel.dp} x "
            f"accumulation {tc.grad_accum}; {describe_lr(lr, tc.lr, default_for, cfg.parallel.lr_scaling)}; "
            f"best checkpoint by dev {tc.metric or task.metric}",
            file=sys.stderr,
        )
    if cfg.resume:
        resume(state, tc.output, parallel)
    advice = collapse_advice(tc.lr, cfg.model.model.startswith("scratch:"), hasattr(task, "class_weights"))
    log = RunLog(tc.output, total_steps, state["progress"].step, enabled=parallel.is_main, advice=advice)
    return Run(task, cfg, labels, pipeline, splits, parallel, precision, trained, sampler, total_steps, state, log)


def describe_lr(lr: float, base: float, default_for: Optional[str], scaling: str) -> str:
    """The learning rate as the run's first lines state it: ``lr`` (scaled with the replicas) from --lr ``base``,
    or from the default for ``default_for`` (None: --lr was given)."""
    if default_for is None:
        return f"lr {lr:.3g} (--lr {base:.3g} scaled {scaling})"
    scaled = "" if lr == base else f", {base:.3g}, scaled {scaling}"
    return f"lr {lr:.3g} (the default for {default_for}{scaled}; --lr to change)"


def resume(state: dict, output: str, parallel: Parallel) -> None:
    """Load ``output``/last into ``state``; the global batch must be the saved run's."""
    global_batch = state["progress"].global_batch
    saved = checkpoint.load_state(os.path.join(output, checkpoint.LAST), state, parallel)
    progress = Progress(**{"global_batch": global_batch, **saved})
    if progress.global_batch != global_batch:  # the data position and the schedule would not match
        was = progress.global_batch
        hint = (
            f"pass --batch-size {was // parallel.dp}"
            if was % parallel.dp == 0
            else f"use a number of data-parallel replicas that divides {was}"
        )
        raise UserError(
            f"--resume: the run used a global batch of {was}, this one has {global_batch} "
            f"(--batch-size {global_batch // parallel.dp} x {parallel.dp} replicas); {hint}"
        )
    state["progress"] = progress
    print(f"resumed at step {progress.step} (epoch {progress.epoch + 1}, batch {progress.batch})", file=sys.stderr)


def fit(run: Run, exiting: bool = False) -> dict:
    """Train until the last epoch, early stopping, ``--stop-after-steps``, Ctrl-C or SIGTERM; returns the metrics
    of the best checkpoint ({} when stopped early with a resumable checkpoint).

    ``exiting``: the caller ends the process after a stop on a signal (a command), so the stop's signal handlers
    stay until it restores its own (``StopRequest.restore``); else they are restored as ``fit`` returns."""
    tc, p, log = run.cfg.train, run.progress, run.log
    stop = StopRequest()
    paused = stopping = False
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
                    evaluate_dev(run)
                if tc.patience and p.bad_evals >= tc.patience:
                    log.say(f"early stop: no dev {metric_name(run)} improvement in {tc.patience} evaluations")
                    p.epoch = tc.epochs
                paused = stopping or p.step == tc.stop_after_steps
                if end_of_epoch or paused or p.epoch == tc.epochs:
                    checkpoint.save_state(os.path.join(tc.output, checkpoint.LAST), run.state, run.parallel)
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
    optimizer.clear_grad()
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


def score(run: Run, split: Split) -> dict:
    """The task's metrics on ``split``: each example scored once across the job, every rank gets them."""
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
    return run.task.evaluate(logits, features, split.examples, run.labels, run.cfg.data)


def evaluate_dev(run: Run) -> None:
    """Score dev; a better score becomes ``best/``."""
    p, metric = run.progress, metric_name(run)
    metrics = score(run, run.splits["dev"])
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


def save_best(run: Run) -> None:
    config = run.cfg.to_dict()
    config["task"] = {**config["task"], **run.task.learned_options(run.progress.dev)}
    checkpoint.save_model(
        os.path.join(run.cfg.train.output, checkpoint.BEST),
        run.net,
        run.pipeline,
        run.labels,
        run.task.name,
        {**config, "labels": run.labels, "inputs": trained_inputs(run.task, run.splits["train"].examples)},
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


def train(task, cfg: RunConfig, inputs: Optional[tuple[dict, list]] = None) -> dict:
    """The training command: fine-tune ``task`` as configured; returns the metrics written to OUTPUT/metrics.json.
    ``inputs``: what ``check_inputs`` returned, when the caller checked them already."""
    try:
        return fit(setup(task, cfg, inputs), exiting=True)
    finally:
        release_output(cfg.train.output or "")


class StopRequest:
    """Ctrl-C (SIGINT) or SIGTERM during training: finish the current step, save a resumable
    checkpoint and exit. A second Ctrl-C aborts at once; a repeated SIGTERM changes nothing (Paddle's
    launcher sends its workers up to three, a scheduler escalates with SIGKILL)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.signum: Optional[int] = None
        self.previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum, frame):
        if self.requested:
            if signum == signal.SIGINT:
                raise Interrupted(signum)
            return
        self.signum = signum
        again = " (Ctrl-C again to abort without saving)" if signum == signal.SIGINT else ""
        print(f"\n{signal.Signals(signum).name}: stopping after this step{again}", file=sys.stderr)

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

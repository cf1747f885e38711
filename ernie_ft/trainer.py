"""The training loop: one explicit loop with evaluation, checkpoints and resume inline."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import sys
import time

import numpy as np

from . import checkpoint, kernels, modeling, runtime
from .batching import LengthGroupedSampler, collate, padding_fraction
from .config import RunConfig
from .dataset import default_cache_dir, featurize, read_splits
from .errors import UserError
from .extension import needs_exact_spans
from .runlog import RunLog


def quiet_libraries() -> None:
    """Keep PaddleNLP's INFO chatter and Paddle's import warnings out of the user's console."""
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from paddlenlp.utils.log import logger

    logger.set_level("WARNING")


def to_tensors(batch: dict) -> dict:
    import paddle

    return {k: paddle.to_tensor(v) for k, v in batch.items()}


def forward(model, batch: dict):
    """Logits for a batch; span heads' (start, end) pair is stacked on the last axis."""
    import paddle

    out = model(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                position_ids=batch.get("position_ids"))
    return paddle.stack(out, axis=-1) if isinstance(out, (tuple, list)) else out


def compute_logits(model, features: list[dict], pad_id: int, batch_size: int, precision=None,
                   head: str = "sequence", parallel=None):
    """Model outputs for every feature, in feature order (numpy).

    A 'sequence' head gives one array [features, labels]; 'token' and 'span' heads give a list
    with one [tokens, outputs] array per feature, cut to the feature's own length. With a
    tensor-parallel ``parallel``, every rank runs every batch.
    """
    import paddle

    per_token = head != "sequence"
    was_training = model.training
    model.eval()
    sampler = LengthGroupedSampler([len(f["input_ids"]) for f in features], batch_size, shuffle=False)
    outputs = [None] * len(features)
    with paddle.no_grad():
        for indices in sampler.batches():
            batch = to_tensors(collate([features[i] for i in indices], pad_id, head == "token"))
            if parallel is not None:
                batch = parallel.distribute(batch, split=False)
            with precision.autocast() if precision else contextlib.nullcontext():
                logits = forward(model, batch)
            logits = (parallel.dense(logits) if parallel is not None else logits).astype("float32").numpy()
            for row, i in enumerate(indices):
                outputs[i] = logits[row, :len(features[i]["input_ids"])] if per_token else logits[row]
    model.train(was_training)
    return outputs if per_token else np.stack(outputs)


def build_optimizer(model, tc, total_steps: int, lr: float):
    """AdamW with linear warm-up to ``lr`` and linear decay; no weight decay on biases and LayerNorm."""
    import paddle
    from paddlenlp.transformers import LinearDecayWithWarmup

    scheduler = LinearDecayWithWarmup(lr, total_steps, tc.warmup)
    decay = {p.name for n, p in model.named_parameters() if not any(s in n for s in ("bias", "norm"))}
    optimizer = paddle.optimizer.AdamW(
        learning_rate=scheduler, parameters=model.parameters(), weight_decay=tc.weight_decay,
        apply_decay_param_fun=lambda name: name in decay,
        grad_clip=paddle.nn.ClipGradByGlobalNorm(tc.max_grad_norm) if tc.max_grad_norm > 0 else None)
    return optimizer, scheduler


class StopRequest:
    """Ctrl-C during training finishes the current step, saves a resumable checkpoint and exits."""

    def __init__(self):
        self.requested = False
        self.previous = signal.signal(signal.SIGINT, self._handle)

    def _handle(self, *_):
        if self.requested:  # a second Ctrl-C aborts at once
            raise KeyboardInterrupt
        self.requested = True
        print("\nstopping after this step (Ctrl-C again to abort without saving)", file=sys.stderr)

    def restore(self):
        signal.signal(signal.SIGINT, self.previous)


def train(task, cfg: RunConfig) -> dict:
    """Fine-tune ``task`` as configured; returns the metrics written to OUTPUT/metrics.json."""
    quiet_libraries()
    data, tc = cfg.data, cfg.train
    if not tc.output:
        raise UserError("--output is required (the directory for the model, metrics and logs)")
    examples, labels = read_splits(task, data)
    checkpoint.check_output(tc.output, cfg.resume, cfg.overwrite)
    out = tc.output
    parallel = runtime.Parallel(cfg.parallel.tensor_parallel)
    main = parallel.is_main
    requested = tc.device
    if cfg.parallel.gpus is not None:  # under the launcher each rank is given its GPU
        requested = "gpu" if parallel.size > 1 else f"gpu:{cfg.parallel.gpus}"
    device = runtime.select_device(requested)
    threads = runtime.set_threads(tc.threads, parallel.size)
    runtime.seed_everything(tc.seed)
    data = dataclasses.replace(data, cache_dir=data.cache_dir or default_cache_dir())
    pipeline = modeling.load_pipeline(cfg.model, data, lambda: task.texts(examples["train"]),
                                      exact_spans=needs_exact_spans(task))
    model = modeling.build_model(cfg.model, task.head, len(labels), pipeline, getattr(task, "model_class", None))
    if hasattr(task, "bind"):
        task.bind(model)
    modeling.check_max_len(data, model, cfg.model.model)
    parallel.check_model(model)
    if main:
        checkpoint.prepare_output(tc.output, cfg.resume, cfg.overwrite)  # only now: nothing is lost on an error
    parallel.barrier()
    runtime.seed_everything(tc.seed + parallel.dp_rank)  # same initial weights, different dropout per replica
    splits = {name: featurize(task, name, ex, pipeline, labels, data, audit_report=name == "train")
              for name, ex in examples.items()}
    metric = tc.metric or task.metric
    run = {**cfg.to_dict(), "labels": labels}
    token_labels = task.head == "token"  # per-token targets, padded with -100
    if not parallel.sharded:
        kernels.enable_fast_kernels(model)
    if tc.recompute:
        runtime.enable_recompute(model)

    train_split = splits["train"]
    lengths = train_split.lengths
    sampler = LengthGroupedSampler(lengths, tc.batch_size, seed=tc.seed, num_replicas=parallel.dp,
                                   rank=None if parallel.sharded else parallel.dp_rank)
    batches_per_epoch = len(sampler.batches(0))
    steps_per_epoch = math.ceil(batches_per_epoch / tc.grad_accum)
    total_steps = steps_per_epoch * tc.epochs
    lr = tc.lr * cfg.parallel.lr_factor(parallel.dp, tc.grad_accum)
    net = parallel.shard(model)  # the bare model, for saving and evaluation (split over a mesh, if any)
    optimizer, scheduler = build_optimizer(net, tc, total_steps, lr)
    optimizer = parallel.wrap_optimizer(optimizer)
    precision = runtime.Precision(tc.amp, tc.amp_level)
    net, optimizer = precision.prepare(net, optimizer)
    model = parallel.wrap(net)  # a DataParallel wrapper under plain data parallelism
    if main:
        print(f"device {device}, {parallel.describe()}, {threads} threads each; "
              f"{'' if task.head == 'span' else f'{len(labels)} labels; '}"
              f"{total_steps} steps ({tc.epochs} epochs x {steps_per_epoch}); global batch "
              f"{tc.batch_size * parallel.dp * tc.grad_accum} = {tc.batch_size} per replica x {parallel.dp} x "
              f"accumulation {tc.grad_accum}; lr {lr:.3g} (--lr {tc.lr:.3g} scaled {cfg.parallel.lr_scaling}); "
              f"best checkpoint by dev {metric}", file=sys.stderr)

    global_batch = tc.batch_size * parallel.dp
    progress = {"step": 0, "epoch": 0, "batch": 0, "best": None, "best_step": None, "bad_evals": 0,
                "dev": None, "global_batch": global_batch}
    if cfg.resume:
        progress, rng = checkpoint.load_state(os.path.join(out, checkpoint.LAST), net, optimizer, scheduler,
                                              precision, parallel.shard_like)
        if progress.setdefault("global_batch", global_batch) != global_batch:  # the data position would not match
            was = progress["global_batch"]
            hint = (f"pass --batch-size {was // parallel.dp}" if was % parallel.dp == 0 else
                    f"use a number of data-parallel replicas that divides {was}")
            raise UserError(f"--resume: the run used a global batch of {was}, this one has {global_batch} "
                            f"(--batch-size {tc.batch_size} x {parallel.dp} replicas); {hint}")
        runtime.set_rng_state(rng)
        print(f"resumed at step {progress['step']} (epoch {progress['epoch'] + 1}, batch {progress['batch']})",
              file=sys.stderr)

    log = RunLog(out, total_steps, progress["step"], enabled=main)
    stop = StopRequest()

    def save_last():
        model_state = parallel.full_state(net.state_dict())  # collectives on a mesh: every rank takes part
        optimizer_state = parallel.full_state(optimizer.state_dict())
        if main:
            checkpoint.save_state(os.path.join(out, checkpoint.LAST), net, model_state, optimizer_state, scheduler,
                                  precision, progress, runtime.rng_state())

    def save_best():
        state = parallel.full_state(net.state_dict()) if parallel.sharded else None
        if main:
            checkpoint.save_model(os.path.join(out, checkpoint.BEST), net, pipeline, labels, task.name, run, state)

    def all_logits(features):
        """Every rank scores its share of the features once; all ranks get all the outputs."""
        if parallel.sharded:  # every rank runs every batch; the mesh splits the matrices
            return compute_logits(net, features, pipeline.pad_id, 2 * tc.batch_size, precision, task.head, parallel)
        mine = list(range(parallel.rank, len(features), parallel.size))
        outputs = compute_logits(net, [features[i] for i in mine], pipeline.pad_id, 2 * tc.batch_size, precision,
                                 task.head)
        merged = [None] * len(features)
        for indices, values in parallel.gather((mine, list(outputs))):
            for i, value in zip(indices, values):
                merged[i] = value
        return merged if task.head != "sequence" else np.stack(merged)

    def evaluate_dev():
        logits = all_logits(splits["dev"].features)
        metrics = task.evaluate(logits, splits["dev"].features, splits["dev"].examples, labels, data)
        if metric not in metrics:
            raise UserError(f"--metric {metric}: the task reports {', '.join(k for k in metrics if isinstance(metrics[k], float))}")
        improved = progress["best"] is None or metrics[metric] > progress["best"]
        if improved:
            progress.update(best=metrics[metric], best_step=progress["step"], bad_evals=0, dev=metrics)
            save_best()
        else:
            progress["bad_evals"] += 1
        log.evaluation(progress["step"], progress["epoch"], "dev", metrics, best=improved)

    model.train()
    finished = stopped = False
    try:
        while progress["epoch"] < tc.epochs and not stopped:
            epoch_batches = sampler.batches(progress["epoch"])
            if progress["batch"] == 0:
                log.say(f"epoch {progress['epoch'] + 1}/{tc.epochs}: {len(epoch_batches)} batches, "
                        f"padding {padding_fraction(epoch_batches, lengths):.1%}")
            tokens, micro = 0, 0
            for b in range(progress["batch"], len(epoch_batches)):
                if micro == 0:
                    tic = time.perf_counter()  # step time: data, forward, backward, update (not evaluation)
                batch = parallel.distribute(to_tensors(collate([train_split.features[i] for i in epoch_batches[b]],
                                                               pipeline.pad_id, token_labels)))
                with precision.autocast():
                    loss = task.loss(forward(model, batch), batch)
                precision.backward(loss / tc.grad_accum)
                tokens += int(lengths[epoch_batches[b]].sum())
                micro += 1
                if micro < tc.grad_accum and b + 1 < len(epoch_batches):
                    continue
                precision.step(optimizer)
                optimizer.clear_grad()
                scheduler.step()
                micro = 0
                progress["step"] += 1
                progress["batch"] = b + 1
                elapsed = time.perf_counter() - tic
                tokens *= 1 if parallel.sharded else parallel.size  # a mesh rank sees the whole global batch
                log.step(progress["step"], parallel.mean(loss), optimizer.get_lr(), tokens / elapsed,
                         progress["epoch"] + 1, log=progress["step"] % tc.log_steps == 0, seconds=elapsed)
                tokens = 0
                end_of_epoch = b + 1 == len(epoch_batches)
                if end_of_epoch:
                    progress.update(epoch=progress["epoch"] + 1, batch=0)
                if "dev" in splits and ((tc.eval_steps and progress["step"] % tc.eval_steps == 0)
                                        or (end_of_epoch and not tc.eval_steps)
                                        or progress["step"] == total_steps):
                    evaluate_dev()
                if tc.patience and progress["bad_evals"] >= tc.patience:
                    log.say(f"early stop: no dev {metric} improvement in {tc.patience} evaluations")
                    progress["epoch"] = tc.epochs
                    stopped = True
                if end_of_epoch or stopped or stop.requested or progress["step"] == tc.stop_after_steps:
                    save_last()
                if stop.requested or progress["step"] == tc.stop_after_steps:
                    stopped = True
                if stopped or end_of_epoch:
                    break
        finished = progress["epoch"] >= tc.epochs
    finally:
        stop.restore()

    if not finished:
        log.close(metric)
        print(f"stopped at step {progress['step']}/{total_steps}; a resumable checkpoint is in "
              f"{os.path.join(out, checkpoint.LAST)}: run the same command with --resume to continue",
              file=sys.stderr)
        if stop.requested:
            raise KeyboardInterrupt
        return {}

    if "dev" not in splits:
        save_best()
    parallel.barrier()
    best_dir = os.path.join(out, checkpoint.BEST)
    results = {"dev": progress["dev"]} if progress["dev"] else {}
    if "test" in splits:
        import paddle

        net.set_state_dict(parallel.shard_like(paddle.load(os.path.join(best_dir, "model_state.pdparams")), net))
        logits = all_logits(splits["test"].features)
        results["test"] = task.evaluate(logits, splits["test"].features, splits["test"].examples, labels, data)
        log.evaluation(progress["best_step"] or progress["step"], progress["epoch"], "test", results["test"])
    if not main:
        return results
    with open(os.path.join(out, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False, indent=1)
    png = log.close(metric)
    print(f"done: best model in {best_dir}; metrics in {os.path.join(out, 'metrics.json')}; curves in {png}",
          file=sys.stderr)
    for split, metrics in results.items():
        shown = " ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))
        print(f"{split}: {shown}")
    return results


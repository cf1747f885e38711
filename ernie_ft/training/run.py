"""A run built for training: ``setup`` reads and checks the data, builds the model, optimizer and schedule for this
job's processes and, on ``--resume``, loads the saved state; ``trainer.fit`` trains the ``Run`` it returns.

Everything a resumed run needs is in ``Run.state`` (model, optimizer, schedule, loss scaler and
``Progress``), which ``resume_state.save_state`` writes and ``resume_state.load_state`` reads whole.
Which processes run, and how they split the work, is ``parallel.Parallel``'s business.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from ernie_ft.config import RunConfig, TrainConfig, learning_rate
from ernie_ft.data.batching import LengthGroupedSampler
from ernie_ft.data.dataset import default_cache_dir, featurize, read_splits
from ernie_ft.errors import UserError
from ernie_ft.models import model_source, modeling
from ernie_ft.training import checkpoint, resume_state
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
    first_token: bool = True
    """A classifier's last layer computed for [CLS] alone (``models.first_token``); a state saved before that
    lacks the key, and its run resumes computing every token, as it trained (dropout draws its masks per shape)."""


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
    """AdamW following ``scheduler``; no weight decay on biases and LayerNorm; gradients clipped to the global norm
    ``tc.max_grad_norm`` (0: not clipped)."""
    import paddle

    decay = {p.name for n, p in model.named_parameters() if not any(s in n for s in ("bias", "norm"))}
    # auto_skip_clip: the gradients are multiplied only when their norm is over the limit; below it Paddle multiplies
    # each one by exactly 1.0, a new tensor per parameter (medium on one core: 90 of the update's 257 ms CPU)
    clip = paddle.nn.ClipGradByGlobalNorm(tc.max_grad_norm, auto_skip_clip=True) if tc.max_grad_norm > 0 else None
    return paddle.optimizer.AdamW(
        learning_rate=scheduler,
        parameters=model.parameters(),
        weight_decay=tc.weight_decay,
        epsilon=tc.adam_epsilon,
        apply_decay_param_fun=lambda name: name in decay,
        grad_clip=clip,
    )


def check_inputs(task, cfg: RunConfig) -> tuple[dict, list]:
    """Every split read and checked, and the output directory: (examples, labels). Paddle is not imported yet, so
    a wrong input fails at once."""
    if not cfg.train.output:
        raise UserError("--output is required (the directory for the model, metrics and logs)")
    model_source.check_spec(cfg.model.model)
    examples, labels = read_splits(task, cfg.data)
    checkpoint.check_output(cfg.train.output, cfg.resume, cfg.overwrite)
    return examples, labels


def setup(task, cfg: RunConfig, inputs: Optional[tuple[dict, list]] = None) -> Run:
    """Read and check the data (unless ``inputs`` holds what ``check_inputs`` returned), build the model and
    optimizer for this job's processes, and on ``--resume`` load the saved state. Nothing is written before the
    inputs and the model are checked; Paddle is imported once the inputs are."""
    examples, labels = check_inputs(task, cfg) if inputs is None else inputs
    from ernie_ft.training import runtime
    from ernie_ft.training.parallel import Parallel

    base_lr, default_for = learning_rate(cfg)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, lr=base_lr))  # saved with the checkpoints
    data, tc = cfg.data, cfg.train
    parallel = Parallel(cfg.parallel.tensor_parallel)
    device = runtime.select_device(runtime.device_for(tc.device, cfg.parallel.gpus, parallel.size))
    # the cores of this node are shared by its own processes (the launcher's PADDLE_LOCAL_SIZE), not every node's
    threads = runtime.set_threads(tc.threads, int(os.environ.get("PADDLE_LOCAL_SIZE", parallel.size)))
    runtime.seed_everything(tc.seed)
    data = dataclasses.replace(data, cache_dir=data.cache_dir or default_cache_dir())
    model_dir = model_source.model_dir_of(cfg.model)  # --model read once, for the pipeline and the model
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
    precision = runtime.Precision(tc.amp, tc.amp_level, device)
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
    if parallel.is_main and precision.warning():
        print(precision.warning(), file=sys.stderr)
    if parallel.is_main:
        rate = describe_lr(lr, tc.lr, default_for, cfg.parallel.lr_scaling, parallel.dp)
        print(
            f"device {device}, {parallel.describe()}, {threads} threads each; "
            f"{f'{len(labels)} labels; ' if labels else ''}"
            f"{total_steps} steps ({tc.epochs} epochs x {steps_per_epoch}); global batch "
            f"{global_batch * tc.grad_accum} = {tc.batch_size} per replica x {parallel.dp} x "
            f"accumulation {tc.grad_accum}; {rate}; best checkpoint by dev {tc.metric or task.metric}",
            file=sys.stderr,
        )
    if cfg.resume:
        resume(state, tc.output, parallel)
    advice = collapse_advice(tc.lr, cfg.model.model.startswith("scratch:"), task.takes_class_weights)
    log = RunLog(tc.output, total_steps, state["progress"].step, enabled=parallel.is_main, advice=advice)
    return Run(task, cfg, labels, pipeline, splits, parallel, precision, trained, sampler, total_steps, state, log)


def describe_lr(lr: float, base: float, default_for: Optional[str], scaling: str, replicas: int = 1) -> str:
    """The learning rate as the run's first lines state it: ``lr`` from --lr ``base`` (``default_for`` None) or from
    the default for ``default_for``. It says "scaled" (by --lr-scaling ``scaling``) only where that changed the rate:
    ``replicas`` data-parallel replicas, or accumulation steps with --scale-lr-with-accum; several replicas at an
    unchanged rate (--lr-scaling none) say that it was not scaled."""
    if lr != base:
        note = f"{base:.3g} scaled {scaling}"
    elif replicas > 1:
        note = f"{base:.3g} not scaled for {replicas} replicas (--lr-scaling {scaling})"
    else:
        note = ""
    if default_for is None:
        return f"lr {lr:.3g} (--lr {note})" if note else f"lr {lr:.3g} (--lr)"
    return f"lr {lr:.3g} (the default for {default_for}{', ' + note if note else ''}; --lr to change)"


def resume(state: dict, output: str, parallel: Parallel) -> None:
    """Load ``output``/last into ``state``; the global batch must be the saved run's."""
    global_batch = state["progress"].global_batch
    saved = resume_state.load_state(os.path.join(output, checkpoint.LAST), state, parallel)
    progress = Progress(**{"global_batch": global_batch, "first_token": False, **saved})
    if not progress.first_token:
        from ernie_ft.models.first_token import every_token

        every_token(state["model"])
    mismatch = resume_state.batch_mismatch(progress.global_batch, global_batch, parallel.dp)
    if mismatch:
        raise UserError(mismatch)
    state["progress"] = progress
    print(f"resumed at step {progress.step} (epoch {progress.epoch + 1}, batch {progress.batch})", file=sys.stderr)

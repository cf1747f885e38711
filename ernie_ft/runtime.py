"""Where and how the model runs: device, threads, seeds, mixed precision and recompute.

Everything that touches devices, processes or precision lives here, so task and model code
never import ``paddle.distributed`` or ``paddle.amp`` themselves.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import re
from dataclasses import dataclass

import numpy as np
import paddle

from . import kernels
from .errors import UserError


def select_device(device: str) -> str:
    """Set Paddle's device from ``auto``, ``cpu``, ``gpu`` or ``gpu:N``; return the one in use."""
    has_gpu = paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
    if device == "auto":
        device = "gpu" if has_gpu else "cpu"
    if device.startswith("gpu") and not has_gpu:
        raise UserError(f"--device {device}: this Paddle build sees no GPU "
                        "(install paddlepaddle-gpu, check CUDA_VISIBLE_DEVICES, or use --device cpu)")
    if device != "cpu" and not device.startswith("gpu"):
        raise UserError(f"--device must be cpu, gpu, gpu:N or auto, not {device!r}")
    if device == "gpu" and "FLAGS_selected_gpus" in os.environ:
        device = f"gpu:{os.environ['FLAGS_selected_gpus'].split(',')[0]}"
    paddle.set_device(device)
    if device == "cpu":
        # View ops (transpose, reshape, slice) copy instead of returning strided views: on CPU the
        # views sent every later kernel down a slow strided path, and the transpose and reshape
        # gradients of the attention heads cost more than their matmuls (nano training step
        # 1.69 s -> 1.25 s, scripts/profile_step.py). Nothing here writes through a view.
        paddle.set_flags({"FLAGS_use_stride_kernel": False})
    return device


def set_threads(threads: int, processes: int = 1) -> int:
    """Give Paddle's CPU math library ``threads`` threads (default: the cores shared by the processes).

    Paddle uses one math thread unless told otherwise, whatever OMP_NUM_THREADS says. The fused
    kernels of ``ernie_ft.kernels`` get the same number.
    """
    n = threads or max(1, (os.cpu_count() or 1) // processes)
    paddle.base.core.set_num_threads(n)
    kernels.set_threads(n)
    return n


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    paddle.seed(seed)


def rng_state() -> dict:
    """Random state to store in a resumable checkpoint (dropout masks depend on it)."""
    state = {"paddle": paddle.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        state["cuda"] = paddle.get_cuda_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    paddle.set_rng_state(state["paddle"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and paddle.is_compiled_with_cuda():
        paddle.set_cuda_rng_state(state["cuda"])


@dataclass
class Precision:
    """Mixed precision as one autocast context plus a loss scaler that is inert unless fp16.

    On CPU, Paddle 3.3 leaves autocast and ``decorate`` without effect and disables the
    GradScaler, so CPU runs compute in fp32 whatever ``amp`` says; the code path is the same
    as on GPU and is tested against an fp32 run.
    """

    amp: str = "off"
    level: str = "O1"

    def __post_init__(self):
        self.dtype = {"fp16": "float16", "bf16": "bfloat16"}.get(self.amp)
        self.wants_scaler = self.amp == "fp16"  # bf16 has fp32's exponent range: nothing to scale
        self.scaler = paddle.amp.GradScaler(enable=self.wants_scaler, init_loss_scaling=2.0 ** 15)

    def prepare(self, model, optimizer):
        """O2 keeps the weights in low precision with fp32 master weights in the optimizer."""
        if self.amp != "off" and self.level == "O2":
            model, optimizer = paddle.amp.decorate(models=model, optimizers=optimizer, level="O2",
                                                   dtype=self.dtype, master_weight=True)
        return model, optimizer

    def autocast(self):
        if self.amp == "off":
            return contextlib.nullcontext()
        return paddle.amp.auto_cast(enable=True, level=self.level, dtype=self.dtype)

    def backward(self, loss) -> None:
        self.scaler.scale(loss).backward()

    def step(self, optimizer) -> None:
        """Unscale (fp16), clip (inside the optimizer), step and update the loss scale."""
        self.scaler.step(optimizer)
        self.scaler.update()

    def state_dict(self) -> dict:
        return self.scaler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        if state:
            self.scaler.load_state_dict(state)


class _Recomputed:
    """Mixed into an encoder layer's class: its activations are recomputed in the backward pass."""

    def forward(self, *args, **kwargs):
        if self.training and kwargs.get("cache") is None:
            from paddle.distributed.fleet.utils import recompute

            kwargs.pop("cache", None)
            return recompute(super().forward, *args, use_reentrant=False, **kwargs)
        return super().forward(*args, **kwargs)


@functools.lru_cache(maxsize=None)
def _recomputed(cls: type) -> type:
    return type(f"Recomputed{cls.__name__}", (_Recomputed, cls), {})


def enable_recompute(model) -> int:
    """Recompute every transformer encoder layer's activations in the backward pass.

    Each layer's class (Paddle's, or ``kernels.FastEncoderLayer``) is swapped for a subclass, so
    parameter names and checkpoints are unchanged. Returns the number of layers switched.
    """
    layers = [layer for layer in model.sublayers()
              if isinstance(layer, paddle.nn.TransformerEncoderLayer) and not isinstance(layer, _Recomputed)]
    for layer in layers:
        layer.__class__ = _recomputed(type(layer))
    return len(layers)


# --- processes -------------------------------------------------------------------------------
LAUNCH_FLAGS = {"--nproc": 1, "--gpus": 1, "--ips": 1}  # flag -> number of values it takes


def world() -> tuple[int, int]:
    """(rank, number of processes) of this job; (0, 1) outside paddle.distributed.launch."""
    return int(os.environ.get("PADDLE_TRAINER_ID", 0)), int(os.environ.get("PADDLE_TRAINERS_NUM", 1))


def needs_launch(parallel) -> bool:
    """True when the flags ask for several processes and this is not one of them yet."""
    if "PADDLE_TRAINER_ID" in os.environ:
        return False
    return parallel.nproc > 1 or bool(parallel.ips) or (parallel.gpus is not None and "," in parallel.gpus)


def launch(module: str, argv: list[str], parallel, output: str) -> int:
    """Run ``python -m module argv`` in one process per device under paddle.distributed.launch.

    The launch flags are removed from ``argv`` (the children run single-device code paths
    with rank and world size from the launcher's environment). Each rank's log goes to
    OUTPUT/logs/workerlog.N. Returns the launcher's exit status.
    """
    import subprocess
    import sys

    child_argv, skip = [], 0
    for arg in argv:
        if skip:
            skip -= 1
            continue
        name = arg.split("=", 1)[0]
        if name in LAUNCH_FLAGS:
            skip = 0 if "=" in arg else LAUNCH_FLAGS[name]
            continue
        child_argv.append(arg)
    command = [sys.executable, "-m", "paddle.distributed.launch", "--log_dir", os.path.join(output, "logs")]
    if parallel.gpus is not None:
        command += ["--devices", parallel.gpus]
    else:
        command += ["--nproc_per_node", str(parallel.nproc)]
    if parallel.ips:
        command += ["--ips", parallel.ips]
    # A non-.py "script" is run as is: every child starts as `python -m ernie_ft.worker`, which
    # runs `python -m module child_argv` from the environment.
    command += [sys.executable, "-m", "ernie_ft.worker"]
    env = {**os.environ, "ERNIE_FT_WORKER_ARGV": json.dumps([module, *child_argv])}
    print(f"launching {parallel.nproc if parallel.gpus is None else len(parallel.gpus.split(','))} processes; "
          f"logs in {os.path.join(output, 'logs')}", file=sys.stderr)
    status = subprocess.call(command, env=env)
    if status:
        print(f"error: the distributed job failed (launcher exit status {status}); the failing rank's log is "
              f"shown above, every rank's log is in {os.path.join(output, 'logs')}", file=sys.stderr)
    return status


# Tensor-parallel plan: layer-name patterns -> how the layer's Linear is split across the "mp" axis.
# Column: the output features are split (q/k/v and the first feed-forward matrix, so attention heads
# and FFN units are local); row: the input features are split and the outputs summed (out_proj and
# the second feed-forward matrix). Everything else (embeddings, LayerNorm, heads) is replicated.
TENSOR_PARALLEL_PLAN = {
    r"\.self_attn\.(q_proj|k_proj|v_proj)$": "column",
    r"\.linear1$": "column",
    r"\.self_attn\.out_proj$": "row",
    r"\.linear2$": "row",
}


class Parallel:
    """The processes of this job as a ``dp x mp`` mesh: data-parallel replicas of tensor-parallel groups.

    With ``tensor_parallel`` 1 this is plain data parallelism (``paddle.DataParallel``, each rank
    feeds its own slice of the global batch). With K > 1 Paddle's auto-parallel API shards the
    model over a ``ProcessMesh`` of (world / K) x K processes by ``TENSOR_PARALLEL_PLAN``; every
    rank then builds the same global batch and Paddle splits it over the "dp" axis.
    """

    def __init__(self, tensor_parallel: int = 1):
        self.rank, self.size = world()
        self.is_main = self.rank == 0
        self.mp = tensor_parallel
        if self.size % self.mp:
            raise UserError(f"--tensor-parallel {self.mp} must divide the number of processes ({self.size}); "
                            f"start them with --nproc N (CPU) or --gpus 0,1,... (a multiple of {self.mp})")
        self.dp = self.size // self.mp
        self.dp_rank = self.rank // self.mp  # the mesh is row-major: rank r sits at (r // mp, r % mp)
        self.mesh = None
        if self.size > 1:
            import paddle.distributed as dist

            dist.init_parallel_env()
            if self.mp > 1:
                ranks = np.arange(self.size).reshape(self.dp, self.mp).tolist()
                self.mesh = dist.ProcessMesh(ranks, dim_names=["dp", "mp"])

    @property
    def sharded(self) -> bool:
        return self.mesh is not None

    def describe(self) -> str:
        if self.sharded:
            return f"mesh {self.dp} data-parallel x {self.mp} tensor-parallel"
        return f"{self.size} data-parallel processes" if self.size > 1 else "1 process"

    def check_model(self, model) -> None:
        """UserError when the model's heads or feed-forward width do not split into ``mp`` parts."""
        if self.mp == 1:
            return
        config = model.config
        for name in ("num_attention_heads", "intermediate_size"):
            if getattr(config, name) % self.mp:
                raise UserError(f"--tensor-parallel {self.mp}: the model has {name} = {getattr(config, name)}, "
                                f"which does not split into {self.mp} equal parts; choose a divisor")

    def shard(self, model):
        """The model with its matrices split over the mesh by the plan (in place); as is without a mesh."""
        if not self.sharded:
            return model
        import paddle.distributed as dist

        return dist.shard_layer(model, self.mesh, self._shard)

    def wrap(self, model):
        """Gradients averaged across data-parallel replicas (on a mesh, Paddle does that itself)."""
        return paddle.DataParallel(model) if self.size > 1 and not self.sharded else model

    def _shard(self, name: str, layer, mesh) -> None:
        import paddle.distributed as dist

        split = next((how for pattern, how in TENSOR_PARALLEL_PLAN.items() if re.search(pattern, name)), None)
        for key, param in list(layer.named_parameters(include_sublayers=False)):
            on_mp = dist.Replicate()
            if split == "column":
                on_mp = dist.Shard(1 if key == "weight" else 0)  # paddle Linear weights are [in, out]
            elif split == "row" and key == "weight":
                on_mp = dist.Shard(0)
            setattr(layer, key, dist.shard_tensor(param, mesh, [dist.Replicate(), on_mp]))

    def wrap_optimizer(self, optimizer):
        """Optimizer state laid out like the parameters it updates."""
        if self.sharded:
            import paddle.distributed as dist

            return dist.shard_optimizer(optimizer)
        return optimizer

    def distribute(self, batch: dict, split: bool = True) -> dict:
        """Tensors for the model: dist tensors split over "dp" (or replicated) on a mesh, else as is.

        Positions are passed explicitly on a mesh: PaddleNLP's ERNIE derives them with ops that
        do not propagate the batch's placements.
        """
        if not self.sharded:
            return batch
        import paddle.distributed as dist

        ids = batch["input_ids"]
        batch = {**batch, "position_ids": paddle.arange(ids.shape[1], dtype="int64").expand_as(ids)}
        placements = [dist.Shard(0) if split and self.dp > 1 else dist.Replicate(), dist.Replicate()]
        return {k: dist.shard_tensor(v, self.mesh, placements) for k, v in batch.items()}

    def dense(self, tensor):
        """A full (gathered) tensor from a parameter, optimizer state or output; a collective on a mesh."""
        import paddle.distributed as dist

        if self.sharded and getattr(tensor, "is_dist", lambda: False)():
            return dist.unshard_dtensor(tensor)
        return tensor

    def full_state(self, state: dict) -> dict:
        """A state dict (nested) with every sharded tensor gathered; call on every rank."""
        if not self.sharded:
            return state
        return {k: self.full_state(v) if isinstance(v, dict) else self.dense(v) for k, v in state.items()}

    def shard_like(self, state: dict, model) -> dict:
        """Full weights (a checkpoint's state dict) laid out like ``model``'s parameters; other entries replicated."""
        if not self.sharded:
            return state
        import paddle.distributed as dist

        params = dict(model.named_parameters())
        replicated = [dist.Replicate(), dist.Replicate()]
        return {k: dist.shard_tensor(v, params[k].process_mesh, params[k].placements) if k in params
                else dist.shard_tensor(v, self.mesh, replicated) for k, v in state.items()}

    def mean(self, value) -> float:
        """The mean over data-parallel replicas of a scalar tensor (a loss), as a float."""
        if self.size == 1 or self.sharded:  # on a mesh the loss is already the global batch's
            return float(value)
        import paddle.distributed as dist

        total = value.detach().clone()
        dist.all_reduce(total)
        return float(total) / self.size

    def gather(self, value) -> list:
        """Every rank's ``value``, in rank order, on every rank."""
        if self.size == 1:
            return [value]
        import paddle.distributed as dist

        values: list = []
        dist.all_gather_object(values, value)
        return values

    def barrier(self) -> None:
        if self.size > 1:
            import paddle.distributed as dist

            dist.barrier()

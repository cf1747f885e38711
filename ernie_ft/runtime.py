"""Where and how the model runs: device, threads, seeds, mixed precision and recompute.

Everything that touches devices, processes or precision lives here, so task and model code
never import ``paddle.distributed`` or ``paddle.amp`` themselves.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
from dataclasses import dataclass

import numpy as np
import paddle

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
    return device


def set_threads(threads: int, processes: int = 1) -> int:
    """Give Paddle's CPU math library ``threads`` threads (default: the cores shared by the processes).

    Paddle uses one math thread unless told otherwise, whatever OMP_NUM_THREADS says.
    """
    n = threads or max(1, (os.cpu_count() or 1) // processes)
    paddle.base.core.set_num_threads(n)
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


class _RecomputedEncoderLayer(paddle.nn.TransformerEncoderLayer):
    """A TransformerEncoderLayer whose activations are recomputed in the backward pass."""

    def forward(self, *args, **kwargs):
        if self.training and kwargs.get("cache") is None:
            from paddle.distributed.fleet.utils import recompute

            kwargs.pop("cache", None)
            return recompute(super().forward, *args, use_reentrant=False, **kwargs)
        return super().forward(*args, **kwargs)


def enable_recompute(model) -> int:
    """Recompute every transformer encoder layer's activations in the backward pass.

    Each layer's class is swapped for a subclass, so parameter names and checkpoints are
    unchanged. Returns the number of layers switched.
    """
    layers = [layer for layer in model.sublayers() if type(layer) is paddle.nn.TransformerEncoderLayer]
    for layer in layers:
        layer.__class__ = _RecomputedEncoderLayer
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
    return subprocess.call(command, env=env)


class Replicas:
    """Data parallelism over the processes of this job (a no-op for one process)."""

    def __init__(self):
        self.rank, self.size = world()
        self.is_main = self.rank == 0
        if self.size > 1:
            import paddle.distributed as dist

            dist.init_parallel_env()

    def wrap(self, model):
        """Average gradients across replicas after each backward pass."""
        return paddle.DataParallel(model) if self.size > 1 else model

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

"""Where and how the model runs in one process: device, threads, seeds, mixed precision, recompute.

With ``parallel`` (processes, data and tensor parallelism) and ``launch`` (starting them), this is
all that touches devices, processes or precision: task and model code never import
``paddle.distributed`` or ``paddle.amp`` themselves.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import sys
from dataclasses import dataclass

import numpy as np
import paddle

from ernie_ft.errors import UserError
from ernie_ft.models import kernels
from ernie_ft.training.cores import available_cores


def device_for(device: str, gpus: str | None, processes: int) -> str:
    """The device to ask ``select_device`` for: with --gpus, the launcher gives each rank its GPU."""
    if gpus is None:
        return device
    return "gpu" if processes > 1 else f"gpu:{gpus}"


def select_device(device: str) -> str:
    """Set Paddle's device from ``auto``, ``cpu``, ``gpu`` or ``gpu:N``; return the one in use."""
    has_gpu = paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
    if device == "auto":
        device = "gpu" if has_gpu else "cpu"
    if device.startswith("gpu") and not has_gpu:
        from ernie_ft.training.gpus import describe_gpus, gpu_count

        # device_for turns --gpus N into gpu:N, so the message names both flags
        raise UserError(
            f"cannot run on {device} (--device or --gpus): {describe_gpus(gpu_count())}; install "
            "paddlepaddle-gpu built for your CUDA version, check CUDA_VISIBLE_DEVICES, or train on "
            "the CPU (--device cpu, without --gpus)"
        )
    if device != "cpu" and not device.startswith("gpu"):
        raise UserError(f"--device must be cpu, gpu, gpu:N or auto, not {device!r}")
    if device == "gpu" and "FLAGS_selected_gpus" in os.environ:
        device = f"gpu:{os.environ['FLAGS_selected_gpus'].split(',')[0]}"
    paddle.set_device(device)
    if device == "cpu":
        # View ops (transpose, reshape, slice) copy instead of returning strided views: on CPU the
        # views sent every later kernel down a slow strided path, and the transpose and reshape
        # gradients of the attention heads cost more than their matmuls (nano training step
        # 1.69 s -> 1.25 s, benchmarks/profile_step.py). Nothing here writes through a view.
        paddle.set_flags({"FLAGS_use_stride_kernel": False})
    return device


def set_threads(threads: int, processes: int = 1) -> int:
    """Give Paddle's CPU math library ``threads`` threads (default: the available cores shared by the processes).

    Paddle uses one math thread unless told otherwise, whatever OMP_NUM_THREADS says. The fused
    kernels of ``ernie_ft.kernels`` get the same number. The count is the whole process's: Paddle has
    none per call and none to read back and restore, so the training setup and Paddle's dygraph engine
    call this for the ``threads`` their caller gives, and nothing else in ernie_ft sets it
    (tests/test_layout.py).
    """
    n = threads or max(1, available_cores() // processes)
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
    GradScaler (its CPU matmul has no bfloat16 or float16 kernel). ``bf16`` there is real where the CPU has
    AVX-512 BF16 or AMX: ``prepare`` switches the model's Linear and attention matmuls to oneDNN's
    (``models.bf16``; weights, optimizer and checkpoints stay fp32). Otherwise CPU runs compute in fp32, on
    the same code path as on GPU, tested against an fp32 run. ``computes`` says the precision a run on
    ``device`` really has, ``warning`` the line a run prints where that is not what ``amp`` asked for.
    """

    amp: str = "off"
    level: str = "O1"
    device: str = "gpu"

    def __post_init__(self):
        self.dtype = {"fp16": "float16", "bf16": "bfloat16"}.get(self.amp)
        self.wants_scaler = self.amp == "fp16"  # bf16 has fp32's exponent range: nothing to scale
        self.scaler = paddle.amp.GradScaler(enable=self.wants_scaler, init_loss_scaling=2.0**15)
        self.cpu_bf16_layers = 0  # layers whose matmuls ``prepare`` switched to bf16 on a CPU

    @property
    def computes(self) -> str:
        """The precision the model's matmuls run in: ``amp``'s on a GPU, fp32 with amp off or on a CPU, except
        bf16 where ``prepare`` made it real."""
        if self.amp == "off" or (self.device.startswith("cpu") and not self.cpu_bf16_layers):
            return "fp32"
        return self.amp

    def warning(self) -> str | None:
        """One line for a run whose ``amp`` has no effect on its device (None otherwise): never a silent fp32."""
        if self.amp == "off" or self.computes == self.amp:
            return None
        return (
            f"warning: --amp {self.amp} on CPU: Paddle {paddle.__version__} has no {self.amp} CPU kernels (its matmul "
            "has none); training in fp32, as the checkpoint records (precision: fp32 in its ernie_ft.yaml)"
        )

    def prepare(self, model, optimizer):
        """O2 keeps the weights in low precision with fp32 master weights in the optimizer. bf16 on a CPU that
        multiplies it: the model's matmuls in bf16, its weights fp32 (``models.bf16``)."""
        if self.amp == "bf16" and self.device.startswith("cpu"):
            from ernie_ft.models import bf16

            self.cpu_bf16_layers = bf16.enable(model)
            if self.cpu_bf16_layers:
                return model, optimizer
        if self.amp != "off" and self.level == "O2":
            model, optimizer = paddle.amp.decorate(
                models=model, optimizers=optimizer, level="O2", dtype=self.dtype, master_weight=True
            )
        return model, optimizer

    def autocast(self):
        if self.amp == "off":
            return contextlib.nullcontext()
        return paddle.amp.auto_cast(enable=True, level=self.level, dtype=self.dtype)

    def backward(self, loss) -> None:
        self.scaler.scale(loss).backward()

    def step(self, optimizer) -> bool:
        """Unscale (fp16), clip (inside the optimizer), step and update the loss scale; True when the
        scaler skipped the update because the fp16 gradients overflowed (it then lowers the scale)."""
        self.scaler.step(optimizer)
        skipped = self.scaler.is_enable() and bool(getattr(self.scaler, "_found_inf", False))
        self.scaler.update()
        return skipped

    def state_dict(self) -> dict:
        return self.scaler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        if state:
            self.scaler.load_state_dict(state)


def enable_recompute(model) -> int:
    """Recompute every transformer encoder layer's activations in the backward pass: each is replaced by a layer of
    the ``fast_layers.Recomputed`` class declared for its class, holding its parameters under their names (checkpoints
    are unchanged) and running Paddle's recompute. Returns the number of layers replaced; encoder layers of a class
    without a recomputed one keep their activations, with a warning that says how many."""
    from paddle.distributed.fleet.utils import recompute

    from ernie_ft.models.fast_layers import Recomputed, recomputing, replace_layers

    run = functools.partial(recompute, use_reentrant=False)
    kept: dict[str, int] = {}

    def replacement(layer):
        new = recomputing(layer, run)
        if new is None and isinstance(layer, paddle.nn.TransformerEncoderLayer) and not isinstance(layer, Recomputed):
            kept[type(layer).__name__] = kept.get(type(layer).__name__, 0) + 1
        return new

    count = replace_layers(model, replacement)
    for name, n in kept.items():
        print(
            f"warning: --recompute: {n} encoder layer(s) of class {name} keep their activations (no recomputed "
            "version of that class)",
            file=sys.stderr,
        )
    return count

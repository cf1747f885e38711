"""The GPUs of ``--gpus``: what Paddle sees in this process, a request checked against it before anything starts
(one UserError saying what to do), and the ids as Paddle's launcher names them.

Ids number the GPUs Paddle sees, as in ``paddle.set_device("gpu:N")``: with CUDA_VISIBLE_DEVICES=3,5, ``--gpus 0,1``
means physical GPUs 3 and 5."""

from __future__ import annotations

import os
from typing import Optional

from ernie_ft.errors import UserError

CPU_ADVICE = "or run on the CPU without --gpus (--nproc N for N processes)"


def gpu_count() -> Optional[int]:
    """How many GPUs Paddle can use in this process; None when this Paddle build has no CUDA support."""
    import paddle

    if not paddle.is_compiled_with_cuda():
        return None
    return paddle.device.cuda.device_count()


def describe_gpus(count: Optional[int]) -> str:
    """What Paddle sees, for an error message: 'Paddle sees 2 GPUs (ids 0-1)' and the like."""
    if count is None:
        return "this Paddle build has no CUDA support (paddlepaddle CPU build)"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    among = f" with CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else ""
    if count == 0:
        return f"Paddle sees no GPU{among}"
    ids = "id 0" if count == 1 else f"ids 0-{count - 1}"
    return f"Paddle sees {count} GPU{'s' if count > 1 else ''} ({ids}){among}"


def check_gpus(gpus: str) -> list[int]:
    """The GPU ids of ``--gpus`` ("0,1,2,3"), or UserError when Paddle cannot give this process each of them.

    One message says what Paddle sees and what to do: install paddlepaddle-gpu, check
    CUDA_VISIBLE_DEVICES, fix the ids, or train on the CPU.
    """
    ids = [int(g) for g in gpus.split(",")]
    count = gpu_count()
    flag = f"--gpus {gpus}"
    if count is None:
        raise UserError(
            f"{flag}: {describe_gpus(count)}; install paddlepaddle-gpu built for your CUDA version, {CPU_ADVICE}"
        )
    if count == 0:
        raise UserError(
            f"{flag}: {describe_gpus(count)}; check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES, {CPU_ADVICE}"
        )
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise UserError(
            f"{flag}: GPU {repeated[0]} is listed twice; give each GPU once, e.g. "
            f"--gpus {','.join(str(i) for i in range(min(len(ids), count)))}"
        )
    if len(ids) > count:
        raise UserError(
            f"{flag} asks for {len(ids)} GPUs but {describe_gpus(count)}; list at most {count}, "
            f"check CUDA_VISIBLE_DEVICES, {CPU_ADVICE}"
        )
    missing = [i for i in ids if i >= count]
    if missing:
        raise UserError(
            f"{flag}: there is no GPU {missing[0]}: {describe_gpus(count)}; ids number the GPUs "
            f"Paddle sees (check CUDA_VISIBLE_DEVICES), {CPU_ADVICE}"
        )
    return ids


def launcher_devices(ids: list[int]) -> str:
    """The launcher's ``--devices`` for GPU ``ids``: it names GPUs as CUDA_VISIBLE_DEVICES lists them."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or visible == "all":
        return ",".join(str(i) for i in ids)
    labels = visible.split(",")
    return ",".join(labels[i] for i in ids)

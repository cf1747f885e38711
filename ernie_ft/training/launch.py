"""Starting several processes: a command re-executes itself under ``paddle.distributed.launch``.

The launcher's own argument parser would take flags such as ``--train`` for abbreviations of
its ``--trainers``, so every child starts as ``python -m ernie_ft.training.worker`` and reads the
command from the environment (see ``worker.py``).

GPU ids in ``--gpus`` number the GPUs Paddle sees, as in ``paddle.set_device("gpu:N")``: with
CUDA_VISIBLE_DEVICES=3,5, ``--gpus 0,1`` means physical GPUs 3 and 5. ``check_gpus`` refuses a
request Paddle cannot serve before anything starts, since the launcher itself would start the
processes and fail with a traceback.

Ctrl-C or a SIGTERM sent to the command reaches the launcher once (it runs in its own session, so a
terminal's Ctrl-C is not delivered twice); the launcher sends its workers SIGTERM, they agree on a
step, save a resumable state and exit, and the command exits 130 or 143.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Optional

from ernie_ft.errors import UserError

LAUNCH_FLAGS = {"--nproc": 1, "--gpus": 1, "--ips": 1}  # flag -> number of values it takes
CPU_ADVICE = "or train on the CPU without --gpus (--nproc N for N processes)"


def needs_launch(parallel) -> bool:
    """True when the flags ask for several processes and this is not one of them yet."""
    if "PADDLE_TRAINER_ID" in os.environ:
        return False
    return parallel.nproc > 1 or bool(parallel.ips) or (parallel.gpus is not None and "," in parallel.gpus)


def child_argv(argv: list[str]) -> list[str]:
    """``argv`` without the launch flags: the children run single-device code paths."""
    kept, skip = [], 0
    for arg in argv:
        if skip:
            skip -= 1
            continue
        name = arg.split("=", 1)[0]
        if name in LAUNCH_FLAGS:
            skip = 0 if "=" in arg else LAUNCH_FLAGS[name]
            continue
        kept.append(arg)
    return kept


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


def launch(argv: list[str], parallel, output: str) -> int:
    """Run ``python -m ernie_ft argv`` in one process per device under paddle.distributed.launch.

    ``parallel`` is the ParallelConfig; with ``gpus`` set the request is checked first
    (``check_gpus``), so a bad one is one UserError and nothing starts. Each rank's log goes to
    OUTPUT/logs/workerlog.N. Returns the launcher's exit status.
    """
    from ernie_ft.training.lock import lock_output, release_output

    command = [sys.executable, "-m", "paddle.distributed.launch", "--log_dir", os.path.join(output, "logs")]
    if parallel.gpus is not None:
        ids = check_gpus(parallel.gpus)
        command += ["--devices", launcher_devices(ids)]
        processes = len(ids)
    else:
        command += ["--nproc_per_node", str(parallel.nproc)]
        processes = parallel.nproc
    lock_output(output)  # held by this process while the workers run
    if parallel.ips:
        command += ["--ips", parallel.ips]
    command += [sys.executable, "-m", "ernie_ft.training.worker"]
    env = {**os.environ, "ERNIE_FT_WORKER_ARGV": json.dumps(["ernie_ft", *child_argv(argv)])}
    print(f"launching {processes} processes; logs in {os.path.join(output, 'logs')}", file=sys.stderr)
    started = time.time()
    try:
        status, signum = run_launcher(command, env)
    finally:
        release_output(output)
    if signum is not None:
        print(stopped(output, started), file=sys.stderr)
        return 128 + signum
    if status:
        print(
            f"error: the distributed job failed (launcher exit status {status}); the failing rank's log is "
            f"shown above, every rank's log is in {os.path.join(output, 'logs')}",
            file=sys.stderr,
        )
    return status


def run_launcher(command: list[str], env: dict) -> tuple[int, Optional[int]]:
    """Run the launcher to its end: (its exit status, the signal that stopped the job or None).

    Ctrl-C and SIGTERM are passed on to the launcher, which passes SIGTERM to the workers; a second
    Ctrl-C makes it kill them after 10 seconds.
    """
    received: list[int] = []
    process = subprocess.Popen(command, env=env, start_new_session=True)

    def forward(signum, frame):
        received.append(signum)
        process.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        status = process.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if process.poll() is None:  # our bug, not a signal: leave no job behind
            process.kill()
    return status, (received[0] if received else None)


def stopped(output: str, started: float) -> str:
    """What a signal left in ``output``: the resumable state the workers saved, or that there is none."""
    # "last" is checkpoint.LAST, not imported: checkpoint imports this module (through runtime)
    state = os.path.join(output, "last", "trainer_state.json")
    if os.path.isfile(state) and os.path.getmtime(state) >= started:
        with open(state, encoding="utf-8") as f:
            step = json.load(f)["step"]
        return (
            f"stopped at step {step}; a resumable checkpoint is in {os.path.dirname(state)}: run the same "
            f"command with --resume to continue"
        )
    return f"stopped before a resumable checkpoint was saved; every rank's log is in {os.path.join(output, 'logs')}"

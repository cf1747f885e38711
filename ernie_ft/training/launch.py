"""Starting several processes: a command re-executes itself under ``paddle.distributed.launch``.

The launcher's own argument parser would take flags such as ``--train`` for abbreviations of
its ``--trainers``, so every child starts as ``python -m ernie_ft.training.worker`` and reads the
command from the environment (see ``worker.py``).

GPU ids in ``--gpus`` number the GPUs Paddle sees, as in ``paddle.set_device("gpu:N")``: with
CUDA_VISIBLE_DEVICES=3,5, ``--gpus 0,1`` means physical GPUs 3 and 5. ``gpus.check_gpus`` refuses a
request Paddle cannot serve before anything starts, since the launcher itself would start the
processes and fail with a traceback.

Ctrl-C or a SIGTERM sent to the command reaches the launcher once (it runs in its own session, so a
terminal's Ctrl-C is not delivered twice); the launcher sends its workers SIGTERM, they agree on a
step, save a resumable state and exit, and the command exits 130 or 143.

Several nodes (``--nnodes N --master HOST:PORT``, the same command on each) meet at the master, which
the launcher of the node at that address serves. They may share one filesystem (or be one machine),
so no node's launcher locks the output directory: each probes it and logs to a directory of its own
(OUTPUT/logs/node-K, or OUTPUT/logs/HOSTNAME), and the job's global rank 0, the one process that
writes the output, holds its lock (``worker.py``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Optional

from ernie_ft.config import master_address
from ernie_ft.errors import UserError
from ernie_ft.training.gpus import check_gpus, launcher_devices
from ernie_ft.training.lock import LOCK
from ernie_ft.training.rendezvous import Rendezvous, watch
from ernie_ft.training.worker import ARGV_VARIABLE, OUTPUT_VARIABLE

# flag -> number of values it takes
LAUNCH_FLAGS = {"--nproc": 1, "--gpus": 1, "--ips": 1, "--nnodes": 1, "--master": 1, "--node-rank": 1}
# What Paddle's launcher takes from the environment over its flags (PADDLE_TRAINER_ID as --rank, the endpoints
# as --master and --nnodes). Schedulers and Kubernetes operators set some of them; the command's flags decide.
LAUNCHER_VARIABLES = (
    "PADDLE_MASTER",
    "PADDLE_NNODES",
    "PADDLE_RANK",
    "PADDLE_TRAINER_ID",
    "PADDLE_NPROC_PER_NODE",
    "PADDLE_DEVICES",
    "PADDLE_IPS",
    "PADDLE_LOG_DIR",
    "PADDLE_TRAINER_ENDPOINTS",
    "DISTRIBUTED_TRAINER_ENDPOINTS",
)


def needs_launch(parallel) -> bool:
    """True when the flags ask for several processes (or nodes) and this is not one of them yet.

    A process ``launch`` started has ``ARGV_VARIABLE``; one another launcher started has PADDLE_TRAINER_ID,
    which the paddle-operator also sets in every pod of a PaddleJob, so there the multi-node flags still launch.
    """
    if ARGV_VARIABLE in os.environ or ("PADDLE_TRAINER_ID" in os.environ and parallel.nodes == 1):
        return False
    return (
        parallel.nproc > 1
        or parallel.nodes > 1
        or bool(parallel.ips)
        or (parallel.gpus is not None and "," in parallel.gpus)
    )


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


def launch(argv: list[str], parallel, output: str) -> int:
    """Run ``python -m ernie_ft argv`` in one process per device under paddle.distributed.launch.

    ``parallel`` is the ParallelConfig; with ``gpus`` set the request is checked first
    (``check_gpus``), so a bad one is one UserError and nothing starts. Each rank's log goes to
    this node's log directory (``node_logs``) as workerlog.N, N counted on this node. Returns the
    launcher's exit status.
    """
    from ernie_ft.training.lock import release_output

    logs = node_logs(output, parallel)
    command = [sys.executable, "-m", "paddle.distributed.launch", "--log_dir", logs]
    if parallel.gpus is not None:
        ids = check_gpus(parallel.gpus)
        command += ["--devices", launcher_devices(ids)]
        processes = len(ids)
    else:
        command += ["--nproc_per_node", str(parallel.nproc)]
        processes = parallel.nproc
    command += node_flags(parallel)
    held = hold_output(output, logs, parallel)  # held by this process while the workers run
    command += [sys.executable, "-m", "ernie_ft.training.worker"]
    print(f"launching {describe_processes(processes, parallel)}; logs in {logs}", file=sys.stderr)
    started = time.time()
    env = launcher_env(argv, output, parallel)
    rendezvous = Rendezvous.start(parallel, master_endpoint(parallel.master)) if parallel.master else None
    try:
        env.update(rendezvous.env() if rendezvous else {})
        status, signum = run_launcher(command, env, rendezvous)
    finally:
        release_output(held)
        if rendezvous:
            rendezvous.close()
    if signum is not None:
        print(stopped(output, started, logs, parallel.nodes), file=sys.stderr)
        return 128 + signum
    if status:
        elsewhere = "; the other nodes' logs are on those nodes" if parallel.nodes > 1 else ""
        print(
            f"error: the distributed job failed (launcher exit status {status}); the failing rank's log is "
            f"shown above, every rank's log of this node is in {logs}{elsewhere}",
            file=sys.stderr,
        )
    return status


def describe_processes(processes: int, parallel) -> str:
    """'2 processes' or, on several nodes, '2 processes on this node (node 1 of 2 nodes, master 10.0.0.1:8090)'."""
    what = f"{processes} process{'es' if processes > 1 else ''}"
    if parallel.nodes == 1:
        return what
    rank = "" if parallel.node_rank is None else f"node {parallel.node_rank} of "
    meet = f"master {parallel.master}" if parallel.master else f"nodes {parallel.ips}"
    return f"{what} on this node ({rank}{parallel.nodes} nodes, {meet})"


def node_flags(parallel) -> list[str]:
    """The launcher's flags that join this node to the others: --ips, or --master, --nnodes and --rank."""
    if parallel.ips:
        return ["--ips", parallel.ips]
    if parallel.nodes == 1:  # --nnodes 1: this node alone, the master is not contacted
        return []
    flags = ["--master", master_endpoint(parallel.master), "--nnodes", str(parallel.nnodes)]
    if parallel.node_rank is not None:
        flags += ["--rank", str(parallel.node_rank)]
    return flags


def master_endpoint(master: str) -> str:
    """``--master HOST:PORT`` for Paddle's launcher, the host as an IPv4 address where it resolves.

    The launcher serves the rendezvous on the node whose own address (or 127.0.0.1) ``--master`` names,
    compared as text: given a host name, no node would serve it and every node would wait. A name that
    does not resolve here yet (a Kubernetes service whose pod is not ready) is passed on as it is: the
    launchers that only connect to the master retry until it answers.
    """
    host, port = master_address(master)
    try:
        host = socket.gethostbyname(host)
    except OSError:
        pass
    return f"{host}:{port}"


def node_logs(output: str, parallel) -> str:
    """This node's log directory: OUTPUT/logs, or on several nodes OUTPUT/logs/node-K (``--node-rank K``) or
    OUTPUT/logs/HOSTNAME, since nodes that share a filesystem would otherwise write the same workerlog.0."""
    logs = os.path.join(output, "logs")
    if parallel.nodes == 1:
        return logs
    return os.path.join(logs, f"node-{parallel.node_rank}" if parallel.node_rank is not None else socket.gethostname())


def hold_output(output: str, logs: str, parallel) -> str:
    """Lock what this launcher owns while its workers run, or UserError if another run holds it; returns the
    locked directory. One node: the output directory. Several: this node's log directory, after checking that
    no other run holds the output directory (its lock goes to the job's global rank 0, see ``worker.py``)."""
    from ernie_ft.training.lock import lock_output

    if parallel.nodes == 1:
        lock_output(output)
        return output
    check_output_free(output)
    try:
        lock_output(logs)
    except UserError:
        raise UserError(
            f"--output {output}: {logs} is in use by another process on this host; when several nodes of a job "
            f"run on one host, give each its own --node-rank (0 to {parallel.nodes - 1})"
        ) from None
    return logs


def check_output_free(output: str) -> None:
    """UserError when another run holds OUTPUT/.lock (a one-node run's launcher, a multi-node job's rank 0).

    The probe takes a shared lock and drops it at once, so the nodes of one job, which probe at the same
    time on a shared filesystem, never exclude each other; their workers start only after every node has
    joined, so rank 0's exclusive lock comes after every probe.
    """
    import fcntl

    path = os.path.join(output, LOCK)
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            holder = f.read().strip()
            raise UserError(
                f"--output {output} is in use by another ernie_ft run{f' (pid {holder})' if holder else ''}; "
                "wait for it to finish or choose another directory"
            ) from None


def launcher_env(argv: list[str], output: str, parallel) -> dict:
    """The launcher's environment: this one without ``LAUNCHER_VARIABLES``, with the command for the workers
    (``ARGV_VARIABLE``), its ports below the ephemeral range (``port_range``, unless PORT_RANGE is set) and, on several
    nodes, the output directory whose lock rank 0 takes."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    env.setdefault("PORT_RANGE", port_range())
    env[ARGV_VARIABLE] = json.dumps(["ernie_ft", *child_argv(argv)])
    if parallel.nodes > 1:
        env[OUTPUT_VARIABLE] = os.path.abspath(output)
    return env


def port_range() -> str:
    """Paddle's launcher picks its ports (``PORT_RANGE``, default 35100:64000) by binding and releasing one, and its
    workers bind it seconds later; a port in the system's ephemeral range (Linux: 32768-60999) can be taken in between
    by any outgoing connection, and the worker then aborts. Ports below that range are only taken on purpose."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return f"{max(1024, low - 12000)}:{max(1025, low - 1)}"


def run_launcher(command: list[str], env: dict, rendezvous: Optional[Rendezvous] = None) -> tuple[int, Optional[int]]:
    """Run the launcher to its end: (its exit status, the signal that stopped the job or None).

    Ctrl-C and SIGTERM are passed on to the launcher, which passes SIGTERM to the workers; a second
    Ctrl-C makes it kill them after 10 seconds. With a ``rendezvous`` (several nodes), a node whose peers do
    not all join within its timeout is stopped (``rendezvous.watch``: UserError, nothing left running).
    """
    received: list[int] = []
    process = subprocess.Popen(command, env=env, start_new_session=True)

    def forward(signum, frame):
        received.append(signum)
        process.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        status = watch(process, rendezvous) if rendezvous is not None else None
        if status is None:
            status = process.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if process.poll() is None:  # our bug, not a signal: leave no job behind
            process.kill()
    return status, (received[0] if received else None)


def stopped(output: str, started: float, logs: Optional[str] = None, nodes: int = 1) -> str:
    """What a signal left in ``output``: the resumable state the workers saved, or that there is none."""
    # "last" is checkpoint.LAST, not imported: checkpoint imports this module (through runtime)
    state = os.path.join(output, "last", "trainer_state.json")
    logs = logs or os.path.join(output, "logs")
    if os.path.isfile(state) and os.path.getmtime(state) >= started:
        with open(state, encoding="utf-8") as f:
            step = json.load(f)["step"]
        return (
            f"stopped at step {step}; a resumable checkpoint is in {os.path.dirname(state)}: run the same "
            f"command with --resume to continue"
        )
    if nodes > 1:
        return (
            f"stopped; a resumable checkpoint, if rank 0 saved one, is in the --output of rank 0's node; this "
            f"node's logs are in {logs}"
        )
    return f"stopped before a resumable checkpoint was saved; every rank's log is in {logs}"

"""Several "nodes" of one job on this machine: one training command each, started together, joined on loopback.

``reserve_port`` holds the master's port until the run ends; ``run_nodes`` starts the commands, waits for all
of them or a deadline, and on a timeout kills every process each command started (the command, Paddle's
launcher in its own session, the workers) and fails with every node's output and worker logs.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

PORT_TAKEN = "Address already in use"  # a failed run that says so is run again on other ports
NOISE = "HTTP Request:"  # the launcher logs each poll of the rendezvous server


def reserve_port() -> socket.socket:
    """A socket holding a free loopback port (``getsockname()[1]``) for the master, to close after the run.

    Bound with SO_REUSEADDR and never listening: the kernel hands the port to no other bind(0) or connect(), and
    Paddle's own free-port probes (a plain bind) skip it, while the launcher's rendezvous server, which sets
    SO_REUSEADDR too, can still bind and listen on it. A port only looked up and released could be taken in the
    seconds before the launcher starts."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def clean_env() -> dict:
    """This environment without Paddle's launch variables, so that a test run under a launcher starts fresh jobs."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_") and not k.startswith("ERNIE_FT_WORKER")}


def tree(pid: int) -> list[int]:
    """``pid`` and every process below it (from /proc: the launcher and the workers run in sessions of their own,
    out of the command's process group)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found


def running(text: str) -> list[int]:
    """The live processes (zombies left out) whose command line contains ``text`` (a node's --master)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if text in cmdline and state != "Z":
                found.append(int(entry))
    return found


def kill_tree(pid: int, timeout: float = 30) -> None:
    """SIGKILL ``pid`` and every process below it, and return once each has died (its pidfd turns readable)."""
    handles = []
    for p in tree(pid):  # gathered first: a killed parent's children would move to init
        try:
            handle = os.pidfd_open(p)
        except ProcessLookupError:
            continue
        signal.pidfd_send_signal(handle, signal.SIGKILL)
        handles.append(handle)
    for handle in handles:
        select.select([handle], [], [], timeout)
        os.close(handle)


def tail(path: Path, chars: int = 3000) -> str:
    if not path.is_file():
        return ""
    lines = [line for line in path.read_text(errors="replace").splitlines() if NOISE not in line]
    return f"--- {path}\n" + "\n".join(lines)[-chars:] + "\n"


def report(consoles: list[Path], outputs: list[Path]) -> str:
    """Every node's console and every worker log under the outputs, for an assertion message."""
    logs = sorted({log for out in outputs for log in out.glob("logs/**/workerlog.*")})
    return "".join(tail(p) for p in [*consoles, *logs])


class Nodes:
    """The commands of one job, started together; ``wait`` returns their exit statuses."""

    def __init__(self, commands: list[list[str]], consoles: list[Path], outputs: list[Path]):
        self.consoles, self.outputs = consoles, outputs
        self.procs = []
        for command, console in zip(commands, consoles):
            with open(console, "w") as f:
                self.procs.append(
                    subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, env=clean_env(), cwd=os.getcwd())
                )

    def kill(self) -> None:
        for proc in self.procs:
            kill_tree(proc.pid)
        for proc in self.procs:
            proc.wait()

    def wait(self, timeout: float) -> list[int]:
        """The exit statuses once every command has ended, or once one has failed (the others, which would wait for
        it at the rendezvous or in a collective, are killed: -9); a test failure with every log after ``timeout``
        seconds (every process of every node killed first)."""
        deadline = time.monotonic() + timeout
        while any(proc.poll() is None for proc in self.procs):
            if any(proc.returncode for proc in self.procs):
                self.kill()
                break
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"the nodes did not finish in {timeout:.0f} s\n" + report(self.consoles, self.outputs))
            try:
                next(proc for proc in self.procs if proc.returncode is None).wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        return [proc.returncode for proc in self.procs]


def run_nodes(args_per_node: list[list[str]], outputs: list[Path], workdir: Path, timeout: float = 240) -> list[int]:
    """Run ``python -m ernie_ft.classify ARGS --master 127.0.0.1:PORT`` for each node's ARGS at once, PORT reserved
    (``reserve_port``); their exit statuses, or a test failure with every log. A run that fails because a port
    was taken (the master's cannot be; the ports Paddle's launcher picks for the workers can) runs again, up to
    3 times."""
    for attempt in range(3):
        with reserve_port() as held:
            master = f"127.0.0.1:{held.getsockname()[1]}"
            consoles = [workdir / f"node{i}.attempt{attempt}.txt" for i in range(len(args_per_node))]
            commands = [[sys.executable, "-m", "ernie_ft.classify", *a, "--master", master] for a in args_per_node]
            statuses = Nodes(commands, consoles, outputs).wait(timeout)
        logs = report(consoles, outputs)
        if any(statuses) and PORT_TAKEN in logs:
            for out in outputs:
                shutil.rmtree(out, ignore_errors=True)
            continue
        assert statuses == [0] * len(commands), f"exit statuses {statuses}\n{logs}"
        return statuses
    pytest.fail(f"ports were taken in 3 attempts\n{logs}")

"""serve's Label Studio runs on disk and in time: one at a time in the order started (``RunQueue``, a bounded queue
behind the one that runs), each in a directory ``RUNS/NNN`` of its own (``new_run``), the oldest removed beyond the
last few (``prune``), never the one whose model is served."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections import deque
from collections.abc import Awaitable, Collection
from typing import Callable, Optional


class RunQueue:
    """Jobs run one at a time, in the order added; at most ``waiting`` wait behind the one that runs. A job is keyed
    (a project): a key already running or waiting is not added again."""

    def __init__(self, waiting: int):
        self.waiting = waiting
        self.pending: deque[tuple[object, str, Callable[[], Awaitable[None]]]] = deque()
        self.current: Optional[tuple[object, str]] = None
        self.worker: Optional[asyncio.Task] = None

    def job_of(self, key) -> Optional[str]:
        """The name of ``key``'s job running or waiting, else None."""
        if self.current is not None and self.current[0] == key:
            return self.current[1]
        return next((name for k, name, _ in self.pending if k == key), None)

    def names(self) -> list[str]:
        """The jobs running and waiting, by name, in the order they run."""
        return ([self.current[1]] if self.current else []) + [name for _, name, _ in self.pending]

    def full(self) -> bool:
        """Whether ``waiting`` jobs wait behind the one that runs (or is about to)."""
        running = self.current is not None or bool(self.pending)
        return running and len(self.pending) - (self.current is None) >= self.waiting

    def add(self, key, name: str, job: Callable[[], Awaitable[None]]) -> str:
        """Queue ``job`` (called when its turn comes): 'started' when nothing runs, else 'queued'. The caller checks
        ``job_of`` and ``full`` first."""
        status = "queued" if self.current is not None or self.pending else "started"
        self.pending.append((key, name, job))
        if self.worker is None or self.worker.done():
            self.worker = asyncio.get_running_loop().create_task(self._drain())
        return status

    async def _drain(self) -> None:
        while self.pending:
            key, name, job = self.pending.popleft()
            self.current = (key, name)
            try:
                await job()
            finally:
                self.current = None

    async def stop(self) -> None:
        """Cancel the running job (serve is stopping) and forget the waiting ones."""
        self.pending.clear()
        if self.worker is not None:
            self.worker.cancel()
            await asyncio.gather(self.worker, return_exceptions=True)


def new_run(runs: str) -> str:
    """A new directory ``runs/NNN``, the number after the highest there (made here: two servers never share one)."""
    os.makedirs(runs, exist_ok=True)
    taken = [int(name) for name in os.listdir(runs) if name.isdigit()]
    number = max(taken, default=0) + 1
    while True:
        path = os.path.join(runs, f"{number:03d}")
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            number += 1


def prune(runs: str, keep: int, spare: Collection[str]) -> list[str]:
    """Remove the oldest run directories of ``runs`` beyond the newest ``keep``, except those in ``spare`` (the
    served model's run, the runs still running or waiting); returns what was removed, said in one line."""
    spared = {os.path.realpath(p) for p in spare}
    names = os.listdir(runs) if os.path.isdir(runs) else []
    found = sorted((int(n), os.path.join(runs, n)) for n in names if n.isdigit())
    removed = []
    for _, path in found[: max(len(found) - keep, 0)]:
        if os.path.realpath(path) not in spared:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    if removed:
        names = ", ".join(os.path.basename(p) for p in removed)
        print(f"label-studio: removed run {names} (serve keeps the last {keep}: --keep-runs)", file=sys.stderr,
              flush=True)  # fmt: skip
    return removed

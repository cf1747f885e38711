"""Dynamic batching: the windows of concurrent requests wait in a bounded queue and run through the model
together, on one model thread; the counters ``GET /v1/stats`` reports."""

from __future__ import annotations

import asyncio
import collections
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Optional

from ernie_ft.serving.limits import Limits


class QueueFull(Exception):
    """``max_queue`` requests are already waiting for the model."""


@dataclass
class _Job:
    features: list[dict]
    future: asyncio.Future


@dataclass
class Stats:
    requests: int = 0  # answered
    in_flight: int = 0  # received, not yet answered
    inputs: int = 0
    rejected: int = 0
    batches: int = 0
    batch_sizes: collections.Counter = field(default_factory=collections.Counter)

    def to_dict(self, queued: int) -> dict:
        return {
            "requests": self.requests,
            "in_flight": self.in_flight,
            "inputs": self.inputs,
            "rejected_queue_full": self.rejected,
            "batches": self.batches,
            "queued": queued,
            "batch_sizes": {str(k): v for k, v in sorted(self.batch_sizes.items())},
        }


class Batcher:
    """Windows of concurrent requests, run through ``run(features)`` together on one thread.

    ``submit`` waits for its own rows of the result. A batch closes at ``max_batch_size`` windows,
    ``max_wait_ms`` after its first job, or once no request is ``incoming`` (being read); a request
    with more windows than that runs alone (``run`` cuts it into batches). At most ``max_queue``
    requests wait; ``submit`` raises QueueFull beyond.
    """

    def __init__(self, run: Callable[[list[dict]], list], limits: Limits, stats: Stats):
        self.run, self.limits, self.stats = run, limits, stats
        self.queue: collections.deque[_Job] = collections.deque()
        self.incoming = 0  # requests being read (prepared) that will submit next: company worth waiting for
        self.wakeup = asyncio.Event()
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="ernie_ft-model")
        self.task: Optional[asyncio.Task] = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        self.executor.shutdown(wait=True)

    async def submit(self, features: list[dict]):
        if len(self.queue) >= self.limits.max_queue:
            self.stats.rejected += 1
            raise QueueFull
        job = _Job(features, asyncio.get_running_loop().create_future())
        self.queue.append(job)
        self.wakeup.set()
        return await job.future

    def _take(self) -> list[_Job]:
        jobs, size = [], 0
        while self.queue and (not jobs or size + len(self.queue[0].features) <= self.limits.max_batch_size):
            job = self.queue.popleft()
            jobs.append(job)
            size += len(job.features)
        return jobs

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.queue:
                self.wakeup.clear()
                await self.wakeup.wait()
            deadline = loop.time() + self.limits.max_wait_ms / 1000
            while (
                self.incoming
                and sum(len(j.features) for j in self.queue) < self.limits.max_batch_size
                and loop.time() < deadline
            ):
                self.wakeup.clear()
                try:
                    await asyncio.wait_for(self.wakeup.wait(), deadline - loop.time())
                except asyncio.TimeoutError:
                    break
            jobs = [job for job in self._take() if not job.future.cancelled()]
            if not jobs:
                continue
            features = [f for job in jobs for f in job.features]
            self.stats.batches += 1
            self.stats.batch_sizes[len(features)] += 1
            try:
                outputs = await loop.run_in_executor(self.executor, self.run, features)
            except Exception as e:  # a bug of ours: fail these requests, keep serving
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(e)
                continue
            start = 0
            for job in jobs:
                rows = outputs[start : start + len(job.features)]
                start += len(job.features)
                if not job.future.done():
                    job.future.set_result(rows)

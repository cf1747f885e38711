"""``predict --nproc N`` and ``--gpus 0,1``: engine processes (started with the spawn method) that each load the model
and answer the chunks the parent reads; the parent writes their answers in input order as they come, with at most
``IN_FLIGHT`` chunks per worker sent and not yet written, so memory stays bounded.

The workers ignore SIGINT and SIGTERM: the parent's ``StopRequest`` decides, and tells them to stop after their batch
(``halt``); every chunk before the first one not answered is written, as in one process. A worker's UserError is the
command's error (after the answers before its chunk are written); a worker that dies is an error naming it, found
within a second, never a wait for an answer that cannot come."""

from __future__ import annotations

import multiprocessing
import queue
import signal
import traceback
from collections.abc import Iterator
from typing import Callable, Optional

from ernie_ft.errors import UserError
from ernie_ft.inference.chunks import Rows

IN_FLIGHT = 2
"""Chunks per worker sent and not yet written: one being answered, one waiting, so no worker idles."""


def worker_devices(nproc: int, gpus: Optional[str], device: str) -> Optional[list[str]]:
    """The device of each worker: ``gpu:K`` per id of ``gpus`` (checked: ``training.gpus.check_gpus``), else
    ``device`` ``nproc`` times; None for one process (no workers)."""
    if nproc < 1:
        raise UserError(f"--nproc must be 1 or more, not {nproc}")
    if gpus is not None:
        from ernie_ft.training.gpus import check_gpus

        try:
            ids = check_gpus(gpus)
        except ValueError:
            raise UserError(f"--gpus {gpus}: expected GPU ids separated by commas, e.g. --gpus 0,1") from None
        if nproc not in (1, len(ids)):
            raise UserError(f"--gpus {gpus} runs one process per GPU ({len(ids)}); leave out --nproc {nproc}")
        return [f"gpu:{i}" for i in ids]
    if device.startswith("gpu") and nproc > 1:
        raise UserError(f"--nproc {nproc} with --device {device}: give the GPUs with --gpus (one process each)")
    return [device] * nproc if nproc > 1 else None


def threads_each(devices: list[str]) -> int:
    """The CPU threads of each worker: the available cores shared between them (at least one)."""
    from ernie_ft.training.cores import available_cores

    return max(1, available_cores() // len(devices))


def describe(devices: Optional[list[str]]) -> str:
    """How the start line names the workers ('' for one process)."""
    if not devices:
        return ""
    if devices[0].startswith("gpu"):
        return f"{len(devices)} processes on {', '.join(devices)}"
    from ernie_ft.inference.stream import device_name

    threads = threads_each(devices)
    return f"{len(devices)} processes of {threads} thread{'s' if threads > 1 else ''} each, {device_name()}"


class Halt:
    """The parent's stop as ``answer_chunk`` asks for it (``signum`` set: stop after this batch)."""

    def __init__(self, event):
        self.event = event

    @property
    def signum(self) -> Optional[int]:
        return signal.SIGINT if self.event.is_set() else None


def work(k: int, load: Callable, device: str, threads: int, path: str, batch_size: int, tasks, results, halt):
    """A worker's life: load the model (``load(device, threads)``: ``predict.load_checked``), then answer each
    (index, rows) of ``tasks`` until None, putting ("answers" | "stopped" | "error" | "bug", index, payload) on
    ``results``."""
    from ernie_ft.inference.stream import answer_chunk
    from ernie_ft.training.quiet import quiet_process

    quiet_process()  # a process of ours: the command's quiet (spawned, it inherits the environment, not the filters)
    for signum in (signal.SIGINT, signal.SIGTERM):  # the parent stops the workers
        signal.signal(signum, signal.SIG_IGN)
    try:
        loaded, data = load(device, threads)
    except UserError as e:
        results.put(("error", None, str(e)))
        return
    except BaseException:  # a bug: its traceback goes to the parent, which raises it
        results.put(("bug", None, f"predict worker {k + 1}:\n{traceback.format_exc()}"))
        return
    seed = (loaded.run or {}).get("train", {}).get("seed", 0)
    while (task := tasks.get()) is not None:
        index, rows = task
        try:
            answers = answer_chunk(loaded, data, rows, path, "--input", batch_size, seed, Halt(halt))
        except UserError as e:  # a bad record: the parent raises it once the chunks before it are written
            results.put(("error", index, str(e)))
            continue
        except BaseException:
            results.put(("bug", index, f"predict worker {k + 1}:\n{traceback.format_exc()}"))
            return
        results.put(("stopped", index, None) if answers is None else ("answers", index, answers))


class Pool:
    """Workers of ``predict``, one per device: ``answers`` turns chunks into their answers, in order."""

    def __init__(self, load: Callable, devices: list[str], threads: int, path: str, batch_size: int):
        context = multiprocessing.get_context("spawn")  # no fork: Paddle's threads and locks do not survive one
        self.tasks, self.results, self.halt = context.Queue(), context.Queue(), context.Event()
        self.workers = [
            context.Process(
                target=work,
                args=(k, load, device, threads, path, batch_size, self.tasks, self.results, self.halt),
                name=f"predict-worker-{k + 1}",
                daemon=True,
            )
            for k, device in enumerate(devices)
        ]
        for worker in self.workers:
            worker.start()

    def answers(self, chunks: Iterator[Rows], stop) -> Iterator[list[dict]]:
        """The answers to each of ``chunks``, in order, until the chunks end or ``stop`` (a ``StopRequest``) is
        requested: then the workers stop after their batch, and the answers up to the first chunk not wholly
        answered come."""
        window, sent, index, ready, more = IN_FLIGHT * len(self.workers), 0, 0, {}, True
        while True:
            while more and sent < index + window and stop.signum is None:
                rows = next(chunks, None)
                if rows is None:
                    more = False
                else:
                    self.tasks.put((sent, rows))
                    sent += 1
            if index == sent:
                return
            while index not in ready:
                if stop.signum is not None:
                    self.halt.set()
                ready.update(self._receive())
            answers = ready.pop(index)
            if isinstance(answers, Exception):
                raise answers
            if answers is None:  # stopped within this chunk: none after it is written either
                return
            yield answers
            index += 1

    def _receive(self) -> dict:
        """{chunk index: its answers, None (stopped), or the UserError to raise} of the next message, {} after a
        second without one; UserError when a worker failed to load or died (checked at every message: a worker killed
        between two chunks is an error too, whichever chunk it held), RuntimeError for a worker's bug."""
        try:
            message = self.results.get(timeout=1.0)
        except queue.Empty:
            message = None
        died = self._died()
        if died is not None:  # what the workers said before it ended comes first: a load error, a bug
            said = [message] if message is not None else []
            while True:
                try:
                    said.append(self.results.get(timeout=0.5))
                except queue.Empty:
                    break
            for kind, index, payload in said:
                if kind == "bug":
                    raise RuntimeError(payload)
                if kind == "error" and index is None:
                    raise UserError(payload)
            raise died
        if message is None:
            return {}
        kind, index, payload = message
        if kind == "bug":
            raise RuntimeError(payload)
        if kind == "error":
            if index is None:  # loading the model: nothing was answered
                raise UserError(payload)
            return {index: UserError(payload)}
        return {index: payload if kind == "answers" else None}

    def _died(self) -> Optional[UserError]:
        """The error of the first worker that ended (they end only when told, in ``close``), else None."""
        for k, worker in enumerate(self.workers):
            code = worker.exitcode
            if code is not None:
                how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"ended with exit status {code}"
                return UserError(
                    f"--nproc: predict worker {k + 1} (pid {worker.pid}) {how} (out of memory? see the system log); "
                    "the answers before its chunk are kept"
                )
        return None

    def close(self, abort: bool = False) -> None:
        """Stop the workers: after the last chunk, None to each and a wait for it to end; on ``abort`` (an error, a
        signal) at once, with SIGKILL (they ignore SIGTERM), as any that has not ended in 30 s."""
        self.tasks.cancel_join_thread()  # chunks nobody will take must not hold the parent at exit
        if not abort:
            for _ in self.workers:
                self.tasks.put(None)
        for worker in self.workers:
            if not abort:
                worker.join(timeout=30)
            if worker.exitcode is None:
                worker.kill()
            worker.join()

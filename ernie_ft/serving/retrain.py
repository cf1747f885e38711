"""Label Studio's "Start training" while ``serve`` serves: a new model trained on what the served model was trained on
plus the project's annotations, in separate processes, and swapped in only when it scores better on tasks that no
step of the run saw.

Label Studio posts ``{"action": "START_TRAINING", "project": {"id": N, ...}}`` to the backend's ``/webhook`` (older
versions post ``{"project": "N.TIMESTAMP", "annotations": [...]}`` to ``/train``). Runs go one at a time, in the
order started (``runs.RunQueue``: ``--training-queue`` wait behind the one that trains, more are answered "already
training", as is a project already running or waiting), each in ``RUNS/NNN`` beside the served model's directory,
the newest ``--keep-runs`` kept (and the served model's). A run (``Retrainer.run``):

1. fetches the project's export through Label Studio's API (``data.label_studio_api``) from the address and with
   the token serve started with (``security.LabelStudioAccess``, never one a request names): ``data/export.json``;
2. writes its data and recipe (``run_data``, in a process of its own; log ``data.log``): the served model's
   training files plus the project's training slice to train on, its dev file plus the project's ``select`` slice
   to pick the checkpoint, the project's ``decide`` slice apart (tasks sliced by a hash of their id); when the served
   model's training file is gone, one line says so and the run continues from the served weights;
3. trains ``python -m ernie_ft TASK --config recipe.yaml`` into ``model/`` (log ``train.log``), and exports it as
   the served model is exported (Paddle Inference, ONNX, int8) when it is not served by Paddle itself;
4. with at least ``--min-dev-tasks`` decide tasks, scores the model served then and the new one on them with
   ``python -m ernie_ft evaluate`` (``eval-served/``, ``eval-new/``: the served model's engine, ``--threshold``,
   ``--task`` and ``--trust-pickle``), and swaps the new one in (``swap``) only when it is better by the run's metric
   (lower for a loss; a tie keeps the served model). One line says what was decided and why; with fewer decide
   tasks the new model stays on disk, and the line says how many more to annotate. A run that fails is one line
   naming its log, and the served model stays.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Callable, Optional

from ernie_ft.data import label_studio_api
from ernie_ft.errors import UserError
from ernie_ft.serving.limits import Limits
from ernie_ft.serving.run_data import DECIDE_SHARE, EXPORTS, PAIR, training_command
from ernie_ft.serving.runs import RunQueue, new_run, prune
from ernie_ft.serving.security import LabelStudioAccess

RUNS = "label-studio-runs"


class RunFailed(Exception):
    """A step of a run that did not finish: the message says which, and where its log is."""


@dataclass(frozen=True)
class Scores:
    """The served and the new model's ``metric`` on the run's ``tasks`` decide tasks."""

    metric: str
    served: float
    new: float

    def better(self) -> bool:
        """Whether the new model scores better: higher, or lower for a metric where lower is better (a loss); a tie
        is not."""
        from ernie_ft.evaluation import lower_is_better

        return self.new < self.served if lower_is_better(self.metric) else self.new > self.served


def continued(summary: dict, name: str, directory: str) -> str:
    """What a run says when the served model's training file is gone (``summary``: ``run_data.Summary`` as a dict):
    it continues from the served weights, those of the model ``name`` in ``directory`` or of the checkpoint that
    model, an int8 export, was exported from."""
    weights = summary["continue_from"]
    source = name if weights == os.path.abspath(directory) else f"{name}, exported from {weights}"
    return (f"{summary['gone']}: training continues from the served weights ({source}) on the project's "
            f"{summary['train']} training tasks")  # fmt: skip


def too_few(tasks: int, minimum: int) -> Optional[str]:
    """Why ``tasks`` decide tasks decide nothing (fewer than ``minimum``), with how many more tasks to annotate (the
    decide slice is a share of them); None when they are enough."""
    if tasks >= minimum:
        return None
    more = math.ceil((minimum - tasks) / DECIDE_SHARE)
    return (f"{tasks} held-out tasks decide a swap and at least {minimum} are needed (--min-dev-tasks): annotate about "
            f"{more} more tasks")  # fmt: skip


class Retrainer:
    """Runs for Label Studio projects of the model ``current()`` serves; ``swap(model_dir, version)`` puts a new
    model in its place (loaded and swapped by the app). ``access``: the Label Studio the projects are fetched from
    (fixed when serve starts). ``runs``: where the runs go (default: ``RUNS`` beside the served model's directory).
    ``limits``: serve's (``training_queue``, ``keep_runs``, ``min_dev_tasks``)."""

    def __init__(
        self,
        current: Callable,
        swap: Callable[[str, str], Awaitable[None]],
        access: LabelStudioAccess,
        runs: Optional[str] = None,
        limits: Optional[Limits] = None,
    ):
        self.current, self.swap, self.access = current, swap, access
        self.runs = runs or os.path.join(os.path.dirname(os.path.abspath(current().loaded.directory)), RUNS)
        self.limits = limits or Limits()
        self.queue = RunQueue(self.limits.training_queue)
        self.children: set = set()

    def start(self, project: int, field: Optional[str] = None) -> dict:
        """Start or queue a run for ``project``: ``{"status": "started" | "queued" | "already training", "job"}``
        (already training: the project's run runs or waits, or the queue is full). ``field``: the key of a task's
        data that holds the text (from the project's labelling config), else found from the tasks."""
        job = self.queue.job_of(project)
        if job is not None:
            return {"status": "already training", "job": job}
        if self.queue.full():
            return {"status": "already training", "job": self.queue.names()[0], "waiting": self.queue.names()[1:],
                    "message": f"{len(self.queue.pending)} runs wait already (--training-queue); start training "
                               "again when one has ended"}  # fmt: skip
        source, token = self.source(project)
        run = new_run(self.runs)
        status = self.queue.add(project, self.name(run), lambda: self.run(project, source, token, run, field))
        how = "training" if status == "started" else "queued"
        print(f"label-studio: project {project}: {how} {self.name(run)} from {source}", file=sys.stderr, flush=True)
        return {"status": status, "job": self.name(run)}

    def name(self, run: str) -> str:
        """What Label Studio and the predictions call the model of ``run``: ``label-studio-runs/001``."""
        return f"{RUNS}/{os.path.basename(run)}"

    def source(self, project: int) -> tuple[label_studio_api.Project, str]:
        """(``project`` of the Label Studio serve started with, with its scheme and export limit; the token)."""
        return self.access.project(project), self.access.token

    async def run(self, project: int, source, token: str, run: str, field: Optional[str]) -> None:
        say = f"label-studio: project {project}: {self.name(run)}"
        try:
            line = await self.train_and_decide(say, source, token, run, field)
            print(f"{say} {line}", file=sys.stderr, flush=True)
        except (RunFailed, UserError) as e:
            print(f"{say} failed: {e}; serving {self.current().name} still", file=sys.stderr, flush=True)
        except Exception as e:  # a bug of ours: said as one line with its kind, serving goes on
            print(f"{say} failed ({type(e).__name__}: {e}); serving {self.current().name} still", file=sys.stderr,
                  flush=True)  # fmt: skip
        finally:
            prune(self.runs, self.limits.keep_runs, self.spared())

    def spared(self) -> list[str]:
        """The run directories never pruned: the served model's, and those of the runs running or waiting."""
        served, runs = os.path.realpath(self.current().model_dir), os.path.realpath(self.runs)
        held = [os.path.relpath(served, runs).split(os.sep)[0]] if served.startswith(runs + os.sep) else []
        return [os.path.join(self.runs, n) for n in [*held, *(os.path.basename(j) for j in self.queue.names())]]

    async def train_and_decide(self, say: str, source, token: str, run: str, field: Optional[str]) -> str:
        """Steps 1-4 of a run; returns the line that says what was decided."""
        from ernie_ft.data.label_config import task_text_fields

        loop, started = asyncio.get_running_loop(), self.current()  # trained on what the model served now was
        environ = {label_studio_api.TOKEN_VARIABLE: token}
        tasks = await loop.run_in_executor(None, label_studio_api.fetch_export, source, "--train", environ)
        export = os.path.join(run, "export.json")
        with open(export, "w", encoding="utf-8") as f:
            json.dump(tasks, f, ensure_ascii=False)
        texts = len(started.trained_with or started.required)  # a sentence pair's two
        fields = (field,) if field and texts == 1 else task_text_fields(None, tasks, texts)
        spec = ["--task", started.task_spec] if started.task_spec else []
        await self.child([sys.executable, "-m", "ernie_ft.serving.run_data", "--model", started.loaded.directory,
                          "--export", export, "--field", *fields, "--output", run, *spec],
                         os.path.join(run, "data.log"), "writing the run's data")  # fmt: skip
        with open(os.path.join(run, "data", "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
        if summary["gone"]:
            print(f"{say}: {continued(summary, started.name, started.loaded.directory)}", file=sys.stderr, flush=True)
        recorded = started.task_spec or (started.loaded.source.run or {}).get("task") or started.task.name
        recipe = os.path.join(run, "recipe.yaml")
        await self.child(training_command(recorded, recipe), os.path.join(run, "train.log"), "training")
        new = await self.like_served(started, os.path.join(run, "model", "best"), run)
        served = self.current()  # the model served at the run's end is the one to beat
        short = too_few(summary["decide"], self.limits.min_dev_tasks)
        if short:
            return f"trained and kept on disk in {new}, not swapped in: {short}; serving {served.name} still"
        scores = await self.scores(served, new, run)
        line = f"dev {scores.metric} {scores.new:.4f}, the served {served.name} {scores.served:.4f}"
        if not scores.better():
            why = "a tie keeps the served model" if scores.new == scores.served else "the new model scores worse"
            return f"{line} on {summary['decide']} held-out tasks: kept {served.name} ({why})"
        await self.swap(new, self.name(run))
        return f"{line} on {summary['decide']} held-out tasks: swapped in as model version {self.name(run)}"

    async def like_served(self, served, checkpoint: str, run: str) -> str:
        """The new ``checkpoint`` as ``served`` is: itself when Paddle runs the served model, else exported for the
        served model's engine (``EXPORTS``) into ``checkpoint-ENGINE``."""
        if served.engine not in EXPORTS:
            return checkpoint
        out = f"{checkpoint}-{served.engine}"
        spec = ["--task", served.task_spec] if served.task_spec else []
        command = [sys.executable, "-m", "ernie_ft", "export", "--model", checkpoint, "--output", out, *spec]
        await self.child([*command, *EXPORTS[served.engine]], os.path.join(run, "export.log"),
                         f"exporting for {served.engine}")  # fmt: skip
        return out

    async def scores(self, served, new: str, run: str) -> Scores:
        """Both models scored on the run's decide tasks as ``served`` serves: its engine, ``--threshold`` (each model's
        own when serve has none), ``--task``, and ``--trust-pickle`` for the served one."""
        from ernie_ft.task import unused_data_settings

        config = served.loaded.run or {}
        metric = (config.get("train") or {}).get("metric") or served.task.metric
        decide = os.path.join(run, "data", "decide.json")
        flags = ["--engine", served.engine, "--device", "gpu" if served.on_gpu else "cpu"]
        flags += ["--task", served.task_spec] if served.task_spec else []
        flags += ["--threshold", str(served.threshold)] if served.threshold is not None else []
        if "text_column" not in unused_data_settings(served.task):  # the run's tasks hold their texts under PAIR
            pair = len(served.trained_with or served.required) > 1
            flags += ["--text-column", PAIR[0], *(["--text-pair-column", PAIR[1]] if pair else [])]
        pickle = ["--trust-pickle"] if served.trust_pickle else []
        scores = await asyncio.gather(  # both at once: most of each is starting Python and loading a model
            self.score(served.model_dir, decide, os.path.join(run, "eval-served"), [*flags, *pickle], metric),
            self.score(new, decide, os.path.join(run, "eval-new"), flags, metric),
        )
        return Scores(metric, *scores)

    async def score(self, model: str, dev: str, out: str, flags: list[str], metric: str) -> float:
        """``model``'s ``metric`` on ``dev`` (``python -m ernie_ft evaluate``, its output in ``out``)."""
        command = [sys.executable, "-m", "ernie_ft", "evaluate", "--model", model, "--input", dev, *flags]
        await self.child([*command, "--output-dir", out], out + ".log", "scoring on the held-out tasks")
        with open(os.path.join(out, "metrics.json"), encoding="utf-8") as f:
            return float(json.load(f)[metric])

    async def child(self, command: list[str], log: str, what: str) -> None:
        """Run ``command`` with its output in ``log``; a non-zero exit raises RunFailed naming the log (and its last
        ``error:`` line, when it has one)."""
        with open(log, "w", encoding="utf-8") as out:
            proc = await asyncio.create_subprocess_exec(*command, stdout=out, stderr=asyncio.subprocess.STDOUT,
                                                        stdin=asyncio.subprocess.DEVNULL)  # fmt: skip
            self.children.add(proc)
            try:
                code = await proc.wait()
            finally:
                self.children.discard(proc)
        if code != 0:
            with open(log, encoding="utf-8", errors="replace") as f:
                said = [line.strip() for line in f if line.startswith("error: ")]
            raise RunFailed(f"{what} exited with {code}{f' ({said[-1]})' if said else ''}, see {log}")

    async def stop(self) -> None:
        """End the runs' processes (serve is stopping): the running run is left unfinished, the waiting ones dropped."""
        for proc in list(self.children):
            if proc.returncode is None:
                proc.terminate()
        await self.queue.stop()


def project_number(project) -> Optional[int]:
    """The project's number from what Label Studio sends: ``"3.1700000000"`` (setup, predict, train), ``{"id": 3}``
    (a webhook) or 3."""
    if isinstance(project, dict):
        project = project.get("id")
    text = str(project).split(".", 1)[0] if project is not None else ""
    return int(text) if text.isdigit() else None

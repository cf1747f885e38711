"""Label Studio's "Start training" while ``serve`` serves: a new model trained from the project's annotations in
separate processes, and swapped in when it scores no worse.

Label Studio posts ``{"action": "START_TRAINING", "project": {"id": N, ...}}`` to the backend's ``/webhook`` (older
versions post ``{"project": "N.TIMESTAMP", "annotations": [...]}`` to ``/train``). A run (``Retrainer.start``), in
``RUNS/NNN`` beside the served model's directory:

1. fetches the project's export through Label Studio's API (``data.label_studio_api``) from the address and
   with the token serve started with (``security.LabelStudioAccess``, never one a request names) and splits its
   annotated tasks into
   ``data/train.json`` and ``data/dev.json`` (every ``DEV_EVERY``-th task by id), Label Studio exports both;
2. trains ``python -m ernie_ft TASK --config recipe.yaml`` into ``model/``: the served model's recipe (its
   ``ernie_ft.yaml``) with these files (log: ``train.log``);
3. scores the served and the new model on ``dev.json`` with ``python -m ernie_ft evaluate`` (``eval-served/``,
   ``eval-new/``), by the run's metric;
4. swaps the new model in (``swap``) when its dev score is not lower, and says so in one line either way; a run
   that fails is one line naming its log, and the served model stays.

One run at a time per project: a second call while one runs is answered "already training".
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Callable, Optional

import yaml

from ernie_ft.data import label_studio_api
from ernie_ft.errors import UserError
from ernie_ft.serving.security import LabelStudioAccess

RUNS = "label-studio-runs"
DEV_EVERY = 5
"""Every 5th annotated task (by id) is dev: a fifth, the same tasks on every run of a project that only grows."""
RECIPE_SECTIONS = ("data", "model", "train", "parallel", "task")
"""The sections of a checkpoint's run config (its ``ernie_ft.yaml``) that a recipe takes."""


class RunFailed(Exception):
    """A step of a run that did not finish: the message says which, and where its log is."""


@dataclass(frozen=True)
class Scores:
    metric: str
    served: float
    new: float

    @property
    def better_or_equal(self) -> bool:
        return self.new >= self.served


class Retrainer:
    """Runs for Label Studio projects of the model ``current()`` serves; ``swap(model_dir, version)`` puts a new
    model in its place (loaded and swapped by the app). ``access``: the Label Studio the projects are fetched from
    (fixed when serve starts). ``runs``: where the runs go (default: ``RUNS`` beside the served model's directory)."""

    def __init__(
        self,
        current: Callable,
        swap: Callable[[str, str], Awaitable[None]],
        access: LabelStudioAccess,
        runs: Optional[str] = None,
    ):
        self.current, self.swap, self.access = current, swap, access
        self.runs = runs or os.path.join(os.path.dirname(os.path.abspath(current().loaded.directory)), RUNS)
        self.running: dict[int, str] = {}  # project -> its run's directory
        self.tasks: set[asyncio.Task] = set()
        self.children: set = set()

    def start(self, project: int, field: Optional[str] = None) -> dict:
        """Start a run for ``project`` unless one runs: ``{"status": "started" | "already training", "job"}``; a
        project whose Label Studio is not known raises UserError. ``field``: the key of a task's data that holds the
        text (from the project's labelling config), else found from the tasks."""
        if project in self.running:
            return {"status": "already training", "job": self.name(self.running[project])}
        source, token = self.source(project)
        run = new_run(self.runs)
        self.running[project] = run
        task = asyncio.get_running_loop().create_task(self.run(project, source, token, run, field))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        print(f"label-studio: project {project}: training {self.name(run)} from {source}", file=sys.stderr, flush=True)
        return {"status": "started", "job": self.name(run)}

    def name(self, run: str) -> str:
        """What Label Studio and the predictions call the model of ``run``: ``label-studio-runs/001``."""
        return f"{RUNS}/{os.path.basename(run)}"

    def source(self, project: int) -> tuple[label_studio_api.Project, str]:
        """(``project`` of the Label Studio serve started with, with its scheme and export limit; the token)."""
        return self.access.project(project), self.access.token

    async def run(self, project: int, source: str, token: str, run: str, field: Optional[str]) -> None:
        served = self.current()
        try:
            scores = await self.train_and_score(served, source, token, run, field)
            line = (
                f"label-studio: project {project}: {self.name(run)} dev {scores.metric} {scores.new:.4f}, the served "
                f"{served.name} {scores.served:.4f}: "
            )
            if scores.better_or_equal:
                await self.swap(os.path.join(run, "model", "best"), self.name(run))
                print(line + f"swapped in as model version {self.name(run)}", file=sys.stderr, flush=True)
            else:
                print(line + f"kept {served.name} (the new model scores lower)", file=sys.stderr, flush=True)
        except (RunFailed, UserError) as e:
            print(f"label-studio: project {project}: {self.name(run)} failed: {e}; serving {served.name} still",
                  file=sys.stderr, flush=True)  # fmt: skip
        except Exception as e:  # a bug of ours: said as one line with its kind, serving goes on
            print(f"label-studio: project {project}: {self.name(run)} failed ({type(e).__name__}: {e}); serving "
                  f"{served.name} still", file=sys.stderr, flush=True)  # fmt: skip
        finally:
            self.running.pop(project, None)

    async def train_and_score(self, served, source: str, token: str, run: str, field: Optional[str]) -> Scores:
        loop = asyncio.get_running_loop()
        environ = {label_studio_api.TOKEN_VARIABLE: token}
        project = label_studio_api.parse(source, "--train")
        tasks = await loop.run_in_executor(None, label_studio_api.fetch_export, project, "--train", environ)
        config = served.loaded.run or {}
        field = field or text_field(tasks)
        train, dev = write_split(tasks, os.path.join(run, "data"), source)
        recipe = write_recipe(config, served.task.name, train, dev, field, run)
        log = os.path.join(run, "train.log")
        await self.child([sys.executable, "-m", "ernie_ft", served.task.name, "--config", recipe], log, "training")
        metric = (config.get("train") or {}).get("metric") or served.task.metric
        columns = ["--text-column", field, "--label-column", "label"] if served.task.name == "classify" else []
        scores = await asyncio.gather(  # both at once: most of each is starting Python and loading a model
            self.score(served.model_dir, dev, os.path.join(run, "eval-served"), columns, metric),
            self.score(os.path.join(run, "model", "best"), dev, os.path.join(run, "eval-new"), columns, metric),
        )
        return Scores(metric, *scores)

    async def score(self, model: str, dev: str, out: str, columns: list[str], metric: str) -> float:
        """``model``'s ``metric`` on ``dev`` (``python -m ernie_ft evaluate``, its output in ``out``)."""
        command = [sys.executable, "-m", "ernie_ft", "evaluate", "--model", model, "--input", dev, *columns]
        await self.child([*command, "--output-dir", out], out + ".log", "scoring on dev")
        with open(os.path.join(out, "metrics.json"), encoding="utf-8") as f:
            return float(json.load(f)[metric])

    async def child(self, command: list[str], log: str, what: str) -> None:
        """Run ``command`` with its output in ``log``; a non-zero exit raises RunFailed naming the log."""
        with open(log, "w", encoding="utf-8") as out:
            proc = await asyncio.create_subprocess_exec(*command, stdout=out, stderr=asyncio.subprocess.STDOUT,
                                                        stdin=asyncio.subprocess.DEVNULL)  # fmt: skip
            self.children.add(proc)
            try:
                code = await proc.wait()
            finally:
                self.children.discard(proc)
        if code != 0:
            raise RunFailed(f"{what} exited with {code}, see {log}")

    async def stop(self) -> None:
        """End the runs' processes (serve is stopping): their runs are left unfinished."""
        for proc in list(self.children):
            if proc.returncode is None:
                proc.terminate()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def project_number(project) -> Optional[int]:
    """The project's number from what Label Studio sends: ``"3.1700000000"`` (setup, predict, train), ``{"id": 3}``
    (a webhook) or 3."""
    if isinstance(project, dict):
        project = project.get("id")
    text = str(project).split(".", 1)[0] if project is not None else ""
    return int(text) if text.isdigit() else None


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


def text_field(tasks: list) -> str:
    """The key of the tasks' data that holds the text: ``text`` when there, else the one string field."""
    keys = {k for t in tasks if isinstance(t, dict) for k, v in (t.get("data") or {}).items() if isinstance(v, str)}
    if "text" in keys or len(keys) != 1:
        return "text"
    return keys.pop()


def write_split(tasks: list, directory: str, source: str) -> tuple[str, str]:
    """``train.json`` and ``dev.json`` in ``directory``: the annotated tasks, every ``DEV_EVERY``-th by id dev."""
    annotated = sorted((t for t in tasks if isinstance(t, dict) and t.get("annotations")), key=lambda t: t.get("id", 0))
    if len(annotated) < 2:
        raise RunFailed(f"{source} has {len(annotated)} annotated tasks; annotate at least {DEV_EVERY} to train")
    dev = [t for i, t in enumerate(annotated) if i % DEV_EVERY == DEV_EVERY - 1] or annotated[-1:]
    train = [t for t in annotated if not any(t is d for d in dev)]
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, part in (("train.json", train), ("dev.json", dev)):
        paths.append(os.path.join(directory, name))
        with open(paths[-1], "w", encoding="utf-8") as f:
            json.dump(part, f, ensure_ascii=False)
    return paths[0], paths[1]


def write_recipe(config: dict, task: str, train: str, dev: str, field: str, run: str) -> str:
    """``run/recipe.yaml``: the served model's run config (``config``) training on ``train`` with ``dev``, into
    ``run/model``."""
    recipe = {section: changed(section, config.get(section) or {}) for section in RECIPE_SECTIONS}
    data = recipe.setdefault("data", {})
    data.update(train=train, dev=dev, test=None, dev_split=None, header=None, sheet=None)
    if task == "classify":
        data.update(text_column=field, text_pair_column=None, label_column="label")
    recipe.setdefault("train", {})["output"] = os.path.join(run, "model")
    path = os.path.join(run, "recipe.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"# python -m ernie_ft {task} --config {path}\n")
        yaml.safe_dump(recipe, f, allow_unicode=True, sort_keys=False)
    return path


def changed(section: str, values: dict) -> dict:
    """The settings of a run config's ``section`` that differ from their defaults: a recipe names only those (a
    task refuses a data setting it does not read, even one left at its default)."""
    from dataclasses import MISSING, fields

    from ernie_ft.recipes import SECTIONS

    if section not in SECTIONS:
        return dict(values)
    defaults = {f.name: f.default for f in fields(SECTIONS[section]) if f.default is not MISSING}
    return {k: v for k, v in values.items() if k not in defaults or defaults[k] != v}

"""The files a Label Studio run (``retrain``) trains and decides on, and its recipe, written in a process of its own:

    python -m ernie_ft.serving.run_data --model SERVED --export EXPORT.json --field FIELD [PAIR_FIELD] --output RUN

The project's annotated tasks are cut into three slices by a hash of their id (``slice_of``), so that a task keeps its
slice on every run however many tasks are annotated before or after it: ``decide`` (two in ten) is what the served
and the new model are scored on to decide the swap, and nothing of the run sees it before; ``select`` (one in ten)
joins the served model's own dev file as the run's ``--dev``, which picks the new model's best checkpoint and tunes
its thresholds; the rest train.

The run trains on what the served model was trained on (the files its ``ernie_ft.yaml`` names, read with its own
settings) plus the project's training slice, in one Label Studio JSON file (``data/train.json``, the text under
``data.text``); an example whose text the project annotated is left out (the annotation is the newer word on it).
When the served model's training file is gone, it says so and the run continues from the served weights instead of
its base model (an int8 export's: the checkpoint it was exported from, ``weights_of``): never the project's tasks
alone on a model that knows nothing. ``RUN/data/summary.json`` holds what
was written (``Summary``) for ``retrain``; ``RUN/recipe.yaml`` is the training command's ``--config``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
from typing import Optional

import yaml

from ernie_ft.errors import UserError
from ernie_ft.serving.settings import EXPORTS as SERVED_EXPORTS

DECIDE, SELECT = (0, 1), (2,)
"""The buckets (a task id's hash modulo 10) of the slice that decides the swap and of the one that picks the new
model's checkpoint; the other seven train."""
DECIDE_SHARE = len(DECIDE) / 10
PAIR = ("text", "text_pair")
"""The keys of the run's tasks' ``data``: the text, and a sentence pair's second text."""
RECIPE_SECTIONS = ("data", "model", "train", "parallel", "task")
"""The sections of a checkpoint's run config (its ``ernie_ft.yaml``) that a recipe takes."""
LABEL_LAYOUT = ("label_columns", "label_separator")
"""The task settings that say how a file holds a multi-label text's labels (0/1 columns, one column split at a
separator): a run's files hold them as Label Studio's choices, so its recipe leaves these out."""
EXPORTS = {"inference": [], "onnxruntime": ["--format", "onnx"], "onnxruntime-int8": ["--format", "onnx",
           "--quantize", "int8"]}  # fmt: skip
"""``export``'s flags that make a new model run on each engine of an export (Paddle runs a checkpoint itself)."""


@dataclasses.dataclass
class Summary:
    """What a run's data holds: tasks per slice, examples taken from the served model's files, and the note when
    those are gone (the run then continues from ``continue_from``, the served weights)."""

    train: int = 0
    select: int = 0
    decide: int = 0
    original: int = 0
    gone: Optional[str] = None
    continue_from: Optional[str] = None


def slice_of(task_id) -> str:
    """'decide', 'select' or 'train' for a Label Studio task id: its SHA-256's bucket, the same on every run."""
    bucket = int(hashlib.sha256(str(task_id).encode()).hexdigest()[:8], 16) % 10
    return "decide" if bucket in DECIDE else "select" if bucket in SELECT else "train"


def project_slices(tasks: list, fields: tuple[str, ...]) -> dict[str, list]:
    """The annotated tasks of an export by slice, each ``{"id", "data": {"text": ...}, "annotations"}``: the text
    under ``fields[0]`` as ``text`` whatever the project calls it (a sentence pair's second, ``fields[1]``, as
    ``text_pair``); its predictions left out: people's labels only."""
    slices: dict[str, list] = {"train": [], "select": [], "decide": []}
    for task in tasks:
        data = task.get("data") if isinstance(task, dict) else None
        if not (isinstance(data, dict) and task.get("annotations")):
            continue
        texts = [data.get(field) for field in fields]
        if not all(isinstance(text, str) for text in texts):
            missing = next(f for f, text in zip(fields, texts) if not isinstance(text, str))
            raise UserError(f"task {task.get('id')}: no text under data.{missing} (data keys: {', '.join(data)})")
        slices[slice_of(task.get("id"))].append(
            {"id": task.get("id"), "data": dict(zip(PAIR, texts)), "annotations": task["annotations"]}
        )
    return slices


def as_task(example, separator: Optional[str]) -> dict:
    """A training example of the classify, ner or relation task as a Label Studio task annotated with its labels."""
    from ernie_ft.data.pre_annotations import label_studio_task
    from ernie_ft.relation.formats import parse_label

    if hasattr(example, "triples"):
        spans = lambda s: {"start": s[0], "end": s[1], "type": s[2]}  # noqa: E731
        record = {"text": example.text, "relations": [
            {"subject": spans(h), "object": spans(t), "predicate": parse_label(c)[0]} for h, c, t in example.triples
        ]}  # fmt: skip
    elif hasattr(example, "entities"):
        record = {"text": example.text, "entities": [{"start": s, "end": e, "type": t} for s, e, t in example.entities]}
    elif hasattr(example, "label"):
        labels = {"labels": list(example.label)} if isinstance(example.label, tuple) else {"label": example.label}
        record = {"text": example.text, "text_pair": getattr(example, "text_pair", None), **labels}
    else:
        raise UserError(f"the served model's examples ({type(example).__name__}) are not classes, entities or "
                        "relations, which a Label Studio run trains on")  # fmt: skip
    task = label_studio_task(record, "", separator=separator)
    return {"data": task["data"], "annotations": [{"result": task["predictions"][0]["result"]}]}


def located(path, checkpoint: str, run: dict) -> Optional[str]:
    """The file ``path`` a checkpoint's run config names, when it is there: as written (absolute, or relative to this
    directory), else relative to the directory the training ran in, found from where its relative ``train.output``
    is now (``runs/v1`` for a checkpoint at ``/work/runs/v1/best``: ``/work``)."""
    if not isinstance(path, str) or os.path.isfile(path) or os.path.isabs(path):
        return path if isinstance(path, str) and os.path.isfile(path) else None
    output = os.path.normpath(str((run.get("train") or {}).get("output") or "/"))
    for place in (os.path.abspath(checkpoint), os.path.dirname(os.path.abspath(checkpoint))):
        if not os.path.isabs(output) and place.endswith(os.sep + output):
            found = os.path.join(place[: -len(output)], path)
            return found if os.path.isfile(found) else None
    return None


def served_tasks(checkpoint: str, task, run: dict) -> tuple[dict[str, list], Optional[str]]:
    """({"train": [...], "dev": [...]}: the examples the served ``checkpoint`` was trained and checked on as Label
    Studio tasks, None) or ({}, why not: its training file is gone)."""
    from ernie_ft.config import DataConfig

    data = run.get("data") or {}
    paths = {name: located(data.get(name), checkpoint, run) for name in ("train", "dev")}
    if paths["train"] is None:
        return {}, f"the served model's training file {data.get('train')} is gone"
    known = {f.name for f in dataclasses.fields(DataConfig)}
    settings = DataConfig(**{k: v for k, v in data.items() if k in known and k not in ("dev", "dev_split")})
    separator = (run.get("task") or {}).get("hierarchy_separator")
    return {name: [as_task(e, separator) for e in task.read(path, settings, f"--{name}")]
            for name, path in paths.items() if path}, None  # fmt: skip


def weights_of(source, gone: str) -> str:
    """The directory a run continues from when the served model's training file is ``gone``: the served model's
    (``source``, a ``ModelDir``), or for an int8 export, which keeps no fp32 weights, the checkpoint it was exported
    from (``DIR`` of ``serve --export``'s ``DIR-int8`` and of a run's ``best-ENGINE``) when its weights' hash is the one
    the export recorded; else UserError naming what is missing."""
    from ernie_ft.inference.onnx import sha256
    from ernie_ft.models.model_dir import BEST
    from ernie_ft.models.weights import PICKLE_WEIGHTS, SAFE_WEIGHTS

    if {SAFE_WEIGHTS, PICKLE_WEIGHTS} & source.files:
        return os.path.abspath(source.path)
    served, recorded = os.path.abspath(source.path), (source.onnx_manifest or {}).get("weights_sha256")
    suffixes = [*SERVED_EXPORTS.values(), *(f"-{engine}" for engine in EXPORTS)]
    for checkpoint in (served[: -len(suffix)] for suffix in suffixes if served.endswith(suffix)):
        for place in (checkpoint, os.path.join(checkpoint, BEST)):  # a run's directory holds its best/
            weights = os.path.join(place, SAFE_WEIGHTS)
            if recorded and os.path.isfile(weights) and sha256(weights) == recorded:
                return place
    raise UserError(
        f"{gone}, and the served model {source.path} is an export without the weights to continue from "
        f"({SAFE_WEIGHTS}), whose checkpoint is not beside it as serve --export leaves it: put the training file "
        "back, or serve the checkpoint with --export int8"
    )


def write_data(model: str, export: str, fields: tuple[str, ...], output: str, spec: Optional[str] = None) -> Summary:
    """``output/data/{train,dev,decide}.json``, ``output/recipe.yaml`` and ``output/data/summary.json`` for a run of
    the served checkpoint ``model`` (``spec``: serve's ``--task``) on the project export ``export``, whose text is in
    each task's ``data`` under ``fields`` (two for a sentence pair)."""
    from ernie_ft.training import checkpoint

    source = checkpoint.checkpoint_dir(model)
    task = checkpoint.recorded_task(source.run, source.path, spec)
    run = source.run["run"]
    with open(export, encoding="utf-8") as f:
        slices = project_slices(json.load(f), fields)
    if not any(slices.values()):
        raise UserError("the project has no annotated task: annotate some, then start training again")
    annotated = {t["data"]["text"] for part in slices.values() for t in part}
    original, gone = served_tasks(source.path, task, run)
    files = {"train": [*original.get("train", []), *slices["train"]], "dev": [*original.get("dev", []),
             *slices["select"]], "decide": slices["decide"]}  # fmt: skip
    for name in ("train", "dev"):  # the project's annotation replaces the served model's label of a text
        files[name] = [t for t in files[name] if "id" in t or t["data"]["text"] not in annotated]
    summary = Summary(len(slices["train"]), len(slices["select"]), len(slices["decide"]), len(files["train"]) -
                      len(slices["train"]), gone, weights_of(source, gone) if gone else None)  # fmt: skip
    if not files["train"]:
        raise UserError("no annotated task of the project falls in the training slice: annotate more tasks")
    os.makedirs(os.path.join(output, "data"), exist_ok=True)
    paths = {}
    for name, tasks in files.items():
        paths[name] = os.path.join(output, "data", f"{name}.json") if tasks or name == "decide" else None
        if paths[name]:
            with open(paths[name], "w", encoding="utf-8") as f:
                json.dump(tasks, f, ensure_ascii=False)
    write_recipe(run, task, source.run["task"] if spec is None else spec, paths, summary, output, len(fields) > 1)
    with open(os.path.join(output, "data", "summary.json"), "w", encoding="utf-8") as f:
        json.dump(dataclasses.asdict(summary), f)
    return summary


def write_recipe(run: dict, task, spec: str, paths: dict, summary: Summary, output: str, pair: bool = False) -> str:
    """``output/recipe.yaml``: the served model's run config (``run``) training on ``paths`` (``pair``: with a
    sentence pair's second text) into ``output/model``, from the served weights when ``summary.continue_from`` says
    so; only the settings that differ from their defaults and that ``task`` reads."""
    from ernie_ft.config import DataConfig
    from ernie_ft.recipes import changed
    from ernie_ft.task import unused_data_settings

    recipe = {section: dict(run.get(section) or {}) for section in RECIPE_SECTIONS}
    # the run's files are Label Studio tasks, labels in their annotations, however the served model's files held them
    recipe["data"].update(train=paths["train"], dev=paths["dev"], test=None, dev_split=None, header=None, sheet=None,
                          text_column="text", text_pair_column=PAIR[1] if pair else None,
                          label_column=DataConfig.label_column, predictions_as_labels=False)  # fmt: skip
    for layout in LABEL_LAYOUT:
        recipe["task"].pop(layout, None)
    unused = unused_data_settings(task)
    recipe["data"] = {k: v for k, v in recipe["data"].items() if k not in unused}
    if summary.continue_from:
        recipe["model"].update(model=summary.continue_from, vocab=None, vocab_extension=None)
    recipe["train"]["output"] = os.path.join(output, "model")
    recipe = {section: changed(section, values) for section, values in recipe.items()}
    path = os.path.join(output, "recipe.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"# python {' '.join(training_command(spec, path)[1:])}\n")
        yaml.safe_dump({k: v for k, v in recipe.items() if v}, f, allow_unicode=True, sort_keys=False)
    return path


def training_command(spec: str, recipe: str) -> list[str]:
    """The command that trains ``recipe`` for the task ``spec`` (a built-in's name, else ``--task SPEC train``)."""
    from ernie_ft.task import BUILTIN

    task = [spec] if spec in BUILTIN else ["--task", spec, "train"]
    return [sys.executable, "-m", "ernie_ft", *task, "--config", recipe]


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ernie_ft.serving.run_data", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="the served checkpoint")
    parser.add_argument("--export", required=True, help="the project's Label Studio JSON export")
    parser.add_argument("--field", required=True, nargs="+", help="the key(s) of a task's data that hold its text(s)")
    parser.add_argument("--output", required=True, help="the run's directory")
    parser.add_argument("--task", help="serve's --task")
    args = parser.parse_args(argv)
    try:
        summary = write_data(args.model, args.export, tuple(args.field), args.output, args.task)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(dataclasses.asdict(summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

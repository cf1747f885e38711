"""Checkpoints on disk.

``OUTPUT/best``: a ready model in PaddleNLP's format (config.json, model_state.pdparams,
vocab.txt, tokenizer_config.json) plus ``labels.json`` and ``ernie_ft.yaml`` (the task and
the resolved run config). ``OUTPUT/last``: everything needed to resume (weights, optimizer,
schedule, loss scaler, random state, data position). Both are written to a temporary
directory first and swapped in, so an interrupted save never leaves a broken checkpoint.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
from dataclasses import dataclass
from typing import Any

import yaml

from .errors import UserError

BEST, LAST, LOGS = "best", "last", "logs"
RUN_FILE = "ernie_ft.yaml"


def check_output(path: str, resume: bool, overwrite: bool) -> None:
    """Refuse to mix a new run into an old one, or to resume what cannot be resumed."""
    state = os.path.join(path, LAST, "trainer_state.json")
    if resume and not os.path.isfile(state):
        raise UserError(f"--resume: {path} has no resumable checkpoint ({state} is missing); "
                        "start without --resume")
    if not resume and not overwrite and os.path.isdir(path) and set(os.listdir(path)) - {LOGS}:
        raise UserError(f"--output {path} already holds files; pass --resume to continue that run, "
                        "--overwrite to replace it, or choose another directory")
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"--output {path} is a file, not a directory")


def prepare_output(path: str, resume: bool, overwrite: bool) -> None:
    """Create the output directory (emptied first with --overwrite)."""
    check_output(path, resume, overwrite)
    if overwrite and not resume and os.path.isdir(path):
        for name in set(os.listdir(path)) - {LOGS}:  # logs/ is being written by the launcher
            target = os.path.join(path, name)
            shutil.rmtree(target) if os.path.isdir(target) else os.remove(target)
    os.makedirs(path, exist_ok=True)


def _swap_in(tmp: str, final: str) -> None:
    old = final + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(final):
        os.rename(final, old)
    os.rename(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def _fresh(path: str) -> str:
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    return tmp


def save_model(path: str, model, pipeline, labels: list[str], task_name: str, run: dict,
               state: dict | None = None) -> None:
    """A self-contained model directory that ``load_model`` and PaddleNLP both read.

    ``state`` replaces the model's own weights (a tensor-parallel model's, gathered).
    """
    tmp = _fresh(path)
    if state is None:
        model.save_pretrained(tmp)
    else:
        import paddle

        model.config.save_pretrained(tmp)
        paddle.save(state, os.path.join(tmp, "model_state.pdparams"))
    pipeline.save(tmp)
    with open(os.path.join(tmp, "labels.json"), "w", encoding="utf-8") as f:
        json.dump(labels, f, ensure_ascii=False, indent=1)
    with open(os.path.join(tmp, RUN_FILE), "w", encoding="utf-8") as f:
        yaml.safe_dump({"task": task_name, "run": run}, f, allow_unicode=True, sort_keys=False)
    _swap_in(tmp, path)


@dataclass
class Loaded:
    model: Any
    pipeline: Any
    labels: list
    task: Any
    run: dict


def resolve_model_dir(path: str) -> str:
    """Accept the run's output directory as well as its best/ checkpoint."""
    if not os.path.isdir(path):
        raise UserError(f"--model {path}: directory not found")
    if not os.path.isfile(os.path.join(path, RUN_FILE)) and os.path.isfile(os.path.join(path, BEST, RUN_FILE)):
        return os.path.join(path, BEST)
    if not os.path.isfile(os.path.join(path, RUN_FILE)):
        raise UserError(f"--model {path}: not an ernie_ft checkpoint (no {RUN_FILE}); "
                        "pass the output directory of a training run or its best/ folder")
    return path


def load_model(path: str, weights: bool = True) -> Loaded:
    """Model, text pipeline, labels, task and run config of a saved checkpoint, ready to predict.

    ``weights=False`` skips the dygraph model (for an exported one), unless the task needs it bound.
    """
    from .modeling import model_class
    from .task import load_task
    from .text import TextPipeline

    path = resolve_model_dir(path)
    with open(os.path.join(path, RUN_FILE), encoding="utf-8") as f:
        meta = yaml.safe_load(f)
    with open(os.path.join(path, "labels.json"), encoding="utf-8") as f:
        labels = json.load(f)
    task = load_task(meta["task"], meta["run"].get("task"))
    model = None
    if weights or hasattr(task, "bind"):
        model = model_class(task.head, getattr(task, "model_class", None)).from_pretrained(path)
        model.eval()
    if hasattr(task, "bind"):
        task.bind(model)
    return Loaded(model, TextPipeline.from_dir(path), labels, task, meta["run"])


def _rename_optimizer_state(state: dict, names: dict) -> dict:
    """Re-key optimizer state from one set of parameter names to another.

    Paddle names accumulators after a process-global parameter counter ("embedding_9.w_0_moment1_0"),
    which differs between two builds of the same model; checkpoints use the structured names
    ("ernie.embeddings.word_embeddings.weight") so a new process, or a new model in the same
    process, can load them.
    """
    prefixes = sorted(names, key=len, reverse=True)
    renamed = {}
    for key, value in state.items():
        if isinstance(value, dict):
            renamed[key] = _rename_optimizer_state(value, names)
            continue
        old = next((p for p in prefixes if key == p or key.startswith(p + "_")), None)
        renamed[key if old is None else names[old] + key[len(old):]] = value
    return renamed


def save_state(path: str, model, model_state: dict, optimizer_state: dict, scheduler, precision, progress: dict,
               rng: dict) -> None:
    """Everything ``load_state`` needs to continue training exactly where it stopped.

    The states are full (gathered) tensors, so any number of processes can resume from them.
    """
    import paddle

    tmp = _fresh(path)
    paddle.save(model_state, os.path.join(tmp, "model.pdparams"))
    to_structured = {p.name: n for n, p in model.named_parameters()}
    paddle.save(_rename_optimizer_state(optimizer_state, to_structured), os.path.join(tmp, "optimizer.pdopt"))
    with open(os.path.join(tmp, "extra.pkl"), "wb") as f:
        pickle.dump({"scheduler": scheduler.state_dict(), "scaler": precision.state_dict(), "rng": rng}, f)
    with open(os.path.join(tmp, "trainer_state.json"), "w", encoding="utf-8") as f:
        json.dump(progress, f, ensure_ascii=False, indent=1)
    _swap_in(tmp, path)


def load_state(path: str, model, optimizer, scheduler, precision, place=None) -> tuple[dict, dict]:
    """Restore weights, optimizer, schedule and scaler in place; return (progress, rng state).

    ``place(state, model)`` lays the full weights out like the model's (sharded) parameters; the
    optimizer takes full tensors (a sharded optimizer splits its state as it creates it).
    """
    import paddle

    place = place or (lambda state, _: state)
    model.set_state_dict(place(paddle.load(os.path.join(path, "model.pdparams")), model))
    to_runtime = {n: p.name for n, p in model.named_parameters()}
    optimizer_state = _rename_optimizer_state(paddle.load(os.path.join(path, "optimizer.pdopt")), to_runtime)
    optimizer.set_state_dict(optimizer_state)
    with open(os.path.join(path, "extra.pkl"), "rb") as f:
        extra = pickle.load(f)
    scheduler.set_state_dict(extra["scheduler"])
    precision.load_state_dict(extra["scaler"])
    with open(os.path.join(path, "trainer_state.json"), encoding="utf-8") as f:
        progress = json.load(f)
    return progress, extra["rng"]

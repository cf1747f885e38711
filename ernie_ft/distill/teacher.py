"""The teacher of a distillation: a trained classification (or softmax NER) checkpoint, what the student takes
from it (labels and data settings), and its soft labels for the student's texts."""

from __future__ import annotations

import os

import numpy as np

from ernie_ft.errors import UserError
from ernie_ft.models.model_dir import ModelDir, read_model_dir
from ernie_ft.task import load_task
from ernie_ft.training import checkpoint

INHERITED = ("text_column", "text_pair_column", "label_column", "label_names", "max_len", "stride", "window_pooling")
"""The teacher's data settings a student gets unless its flags or recipe set them."""
NER_INHERITED = ("max_len", "stride")
"""Those of an NER teacher: NER reads no columns and pools no windows."""
TASKS = ("classify", "ner")
"""The tasks a teacher may have been trained for."""


def teacher_dir(path: str) -> str:
    """The checkpoint directory of ``--teacher`` (a classification or NER run's output directory or its best/); a
    missing directory, a directory that holds no checkpoint, a checkpoint of another task or an NER checkpoint
    with a CRF is a UserError."""
    if not os.path.isdir(path):
        raise UserError(f"--teacher {path}: directory not found; pass a classification run's output directory")
    found = checkpoint.checkpoint_dir(teacher_model(path), "--teacher")
    if found.run is None:
        raise UserError(
            f"--teacher {path}: a transformers checkpoint; distill takes an ernie_ft run as its teacher: fine-tune "
            f"it first, e.g. python -m ernie_ft.classify --model {path} --train FILE --output RUN"
        )
    task = found.task
    if task not in TASKS:
        raise UserError(
            f"--teacher {path}: a {task} checkpoint; distill takes a classification teacher (a run of "
            "python -m ernie_ft classify) or an NER teacher trained without --crf (python -m ernie_ft ner)"
        )
    options = found.run["run"].get("task") or {}
    nested = options.get("nested")  # a span model: its scores teach a nested student (distill/nested.py)
    if task == "ner" and not nested and load_task(task, options).model_class is not None:
        raise UserError(
            f"--teacher {path}: an NER run trained with --crf; distill takes an NER teacher without --crf only "
            "(its per-token softmax gives the soft labels; a CRF scores whole tag sequences): train the teacher "
            "with python -m ernie_ft ner without --crf"
        )
    return found.path


def teacher_model(directory: str) -> ModelDir:
    """The teacher's directory read once (``read_model_dir``): the distillation's steps ask it for its task, run,
    labels and tokenizer again and again, and get what was read (a run's directory and its best/ alike). A
    directory replaced since (a new checkpoint swapped in: another inode or modification time) is read again."""
    key = _key(directory)
    if key not in _READ:
        found = read_model_dir(directory, "--teacher")
        _READ[key] = _READ[_key(found.path)] = found
    return _READ[key]


_READ: dict[tuple, ModelDir] = {}


def _key(directory: str) -> tuple:
    status = os.stat(directory)
    return os.path.abspath(directory), status.st_ino, status.st_mtime_ns


def teacher_task(directory: str) -> str:
    """The task the checkpoint ``directory`` was trained for: classify, ner, ..."""
    return recorded_run(directory)["task"]


def recorded_run(directory: str) -> dict:
    """The checkpoint's ``ernie_ft.yaml``: {'task': spec, 'run': the run config}."""
    run = teacher_model(directory).run
    if run is None:
        raise UserError(
            f"--teacher {directory}: no {checkpoint.RUN_FILE}; pass a classification run's output directory"
        )
    return run


def label_set_options(directory: str, given: dict) -> dict:
    """A multi-label or hierarchical classification teacher's label-set settings for its student (see
    ``labelsets.student_options``); {} for a single-label teacher."""
    from ernie_ft.distill.labelsets import student_options

    return student_options(recorded_run(directory)["run"].get("task") or {}, given)


def teacher_labels(directory: str) -> list[str]:
    labels = checkpoint.checkpoint_dir(teacher_model(directory), "--teacher").labels
    if labels is None:
        raise UserError(
            f"--teacher {directory}: no {checkpoint.LABELS_FILE}; pass a classification run's output directory"
        )
    return labels


def inherited_data(directory: str, given: dict) -> dict:
    """The teacher's data settings (``INHERITED``) that ``given`` (the student's flags and recipe) leaves unset.
    The teacher's --stride belongs to its --max-len: a student with its own --max-len does not take it."""
    trained = recorded_run(directory)["run"]["data"]
    inherited = NER_INHERITED if teacher_task(directory) == "ner" else INHERITED
    keep = [k for k in inherited if k not in given and not (k == "stride" and "max_len" in given)]
    return {k: trained[k] for k in keep if trained.get(k) is not None}


def soft_labels(directory: str, examples: list, cache_dir: str | None, batch_size: int = 64) -> np.ndarray:
    """The teacher's logits per example ([examples, labels], float32): its windows over each text (its own
    vocabulary, --max-len and --stride), pooled per text as its predictions pool them (--window-pooling).

    The model runs on the current Paddle device, with the math threads already set, in dygraph."""
    from ernie_ft.data.windows import pool_windows
    from ernie_ft.inference.predict import inference_data
    from ernie_ft.models.fast_layers import enable_fast_kernels
    from ernie_ft.models.modeling import compute_logits

    loaded = checkpoint.load_model(teacher_model(directory))
    enable_fast_kernels(loaded.model)
    data = inference_data(loaded.run["data"], {}, loaded.task)
    if getattr(loaded.task, "sets", False):  # label sets: an unlabelled text (None) reads as the empty set
        from ernie_ft.distill.labelsets import filled

        examples = filled(examples)
    encodings = loaded.pipeline.encode_many(loaded.task.texts(examples), cache_dir=cache_dir)
    features = loaded.task.featurize(examples, encodings, loaded.pipeline, loaded.labels, data)
    logits = compute_logits(loaded.model, features, loaded.pipeline.pad_id, batch_size)
    docs = np.array([f["doc"] for f in features])
    return pool_windows(np.asarray(logits, dtype=np.float32), docs, len(examples), data.window_pooling)

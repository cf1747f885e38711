"""The teacher of a distillation: a trained checkpoint whose task names the student's task (``TaskHooks.distillation``:
classification, a softmax NER tagger, nested NER), what the student takes from it (labels and data settings), and its
soft labels for the student's texts."""

from __future__ import annotations

import os

import numpy as np

from ernie_ft.errors import UserError
from ernie_ft.models.model_dir import ModelDir, read_model_dir
from ernie_ft.task import resolve_task
from ernie_ft.training import checkpoint

INHERITED = ("text_column", "text_pair_column", "label_column", "label_names", "max_len", "stride", "window_pooling")
"""The teacher's data settings a student gets unless its flags or recipe set them."""
NER_INHERITED = ("max_len", "stride")
"""Those of an NER teacher: NER reads no columns and pools no windows."""


def teacher_dir(path: str) -> str:
    """The checkpoint directory of ``--teacher`` (a classification or NER run's output directory or its best/); a
    missing directory, a directory that holds no checkpoint, or a checkpoint whose task names no distillation or
    whose distillation refuses it (``student_class``: an NER tagger with a CRF) is a UserError."""
    if not os.path.isdir(path):
        raise UserError(f"--teacher {path}: directory not found; pass a classification run's output directory")
    found = checkpoint.checkpoint_dir(teacher_model(path), "--teacher")
    if found.run is None:
        raise UserError(
            f"--teacher {path}: a transformers checkpoint; distill takes an ernie_ft run as its teacher: fine-tune "
            f"it first, e.g. python -m ernie_ft.classify --model {path} --train FILE --output RUN"
        )
    student_class(found.path, path)
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
    """The name of the task the checkpoint ``directory`` was trained for (classify, ner, ...), for messages: what the
    teacher's task is and does is ``trained_task``'s."""
    return recorded_run(directory)["task"]


def trained_task(directory: str):
    """The task of the checkpoint ``directory`` with the options it recorded, as ``checkpoint.load_model`` makes it
    (no weights read, no code inside the checkpoint run: ``checkpoint.checkpoint_task``)."""
    return checkpoint.recorded_task(recorded_run(directory), directory)


def student_class(directory: str, path: str | None = None) -> type:
    """The task class that trains the student of the teacher checkpoint ``directory`` (``--teacher path``): the
    distillation its task declares (``TaskHooks.distillation``), which checks the teacher (``check_teacher``). A task
    that declares none is a UserError."""
    path = path or directory
    task = trained_task(directory)
    if task.distillation is None:
        raise UserError(
            f"--teacher {path}: a {task.name} checkpoint; distill takes a classification teacher (a run of "
            "python -m ernie_ft classify) or an NER teacher trained without --crf (python -m ernie_ft ner), or the "
            "run of a task that names its distillation (TaskHooks.distillation)"
        )
    student = resolve_task(task.distillation)
    student.check_teacher(task, path)
    return student


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
    inherited = student_class(directory).inherits  # what the student's kind reads: an NER student no columns
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
    if loaded.task.output_kind == "sigmoid":  # label sets: an unlabelled text (None) reads as the empty set
        from ernie_ft.distill.labelsets import filled

        examples = filled(examples)
    encodings = loaded.pipeline.encode_many(loaded.task.texts(examples), cache_dir=cache_dir)
    features = loaded.task.featurize(examples, encodings, loaded.pipeline, loaded.labels, data)
    logits = compute_logits(loaded.model, features, loaded.pipeline.pad_id, batch_size)
    docs = np.array([f["doc"] for f in features])
    return pool_windows(np.asarray(logits, dtype=np.float32), docs, len(examples), data.window_pooling)

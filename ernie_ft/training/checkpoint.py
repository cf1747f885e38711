"""Checkpoints on disk.

``OUTPUT/best``: a ready model in PaddleNLP's format (config.json, model.safetensors,
vocab.txt, tokenizer_config.json) plus ``labels.json`` and ``ernie_ft.yaml`` (the task and
the resolved run config). Model weights are safetensors, which hold only tensors: loading a
model directory never unpickles a file from it unless the user passes --trust-pickle (see
``weights_format``). ``OUTPUT/last``: everything needed to resume (weights, optimizer,
schedule, loss scaler, random state, data position; ``resume_state``). Both are written to a temporary
directory first and swapped in, so an interrupted save never leaves a broken checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from typing import Any

import yaml

from ernie_ft.errors import UserError
from ernie_ft.models import hf
from ernie_ft.models.model_dir import BEST, LABELS_FILE, LAST, RUN_FILE, ModelDir, SavedArrays, as_model_dir
from ernie_ft.models.weights import SAFE_WEIGHTS, from_pretrained
from ernie_ft.task import BUILTIN, create_task, load_task, recorded_spec, resolve_task, task_source
from ernie_ft.training.lock import LOCK, lock_output

LOGS = "logs"


def recover(path: str) -> None:
    """Finish or undo a swap of ``path`` (best/ or last/) that a killed process left half done (see ``_swap_in``)."""
    old, tmp = path + ".old", path + ".tmp"
    if not os.path.exists(path) and os.path.isdir(old):
        os.rename(old, path)  # killed between the two renames: the previous checkpoint comes back
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)  # killed while writing: never complete, never read


def check_output(path: str, resume: bool, overwrite: bool) -> None:
    """Refuse to mix a new run into an old one, or to resume what cannot be resumed. Only global rank 0 needs the
    checkpoint to resume from: the other ranks receive it (``load_state``), so their node may have no copy."""
    state = os.path.join(path, LAST, "trainer_state.json")
    if resume and not os.path.isfile(state) and os.path.isfile(os.path.join(path, LAST + ".old", "trainer_state.json")):
        state = os.path.join(path, LAST + ".old", "trainer_state.json")  # recover() puts it back
    main = os.environ.get("PADDLE_TRAINER_ID", "0") == "0"  # parallel.world()'s rank, read before Paddle is imported
    if resume and main and not os.path.isfile(state):
        raise UserError(f"--resume: {path} has no resumable checkpoint ({state} is missing); start without --resume")
    if not resume and not overwrite and os.path.isdir(path) and set(os.listdir(path)) - {LOGS, LOCK}:
        raise UserError(
            f"--output {path} already holds files; pass --resume to continue that run, "
            "--overwrite to replace it, or choose another directory"
        )
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"--output {path} is a file, not a directory")


def prepare_output(path: str, resume: bool, overwrite: bool, lock: bool = True) -> None:
    """Create and lock the output directory (emptied first with --overwrite; half-done saves of a
    killed run recovered with --resume). ``lock``: False where the launcher holds the lock."""
    check_output(path, resume, overwrite)
    if lock:
        lock_output(path)
    for name in (BEST, LAST):
        recover(os.path.join(path, name))
    if overwrite and not resume and os.path.isdir(path):
        for name in set(os.listdir(path)) - {LOGS, LOCK}:  # logs/ is being written by the launcher
            target = os.path.join(path, name)
            shutil.rmtree(target) if os.path.isdir(target) else os.remove(target)
    os.makedirs(path, exist_ok=True)


class SaveError(UserError):
    """A checkpoint could not be written (disk full, permissions); the previous one is intact."""


def write_atomically(path: str, write) -> None:
    """Run ``write(tmp)`` on a fresh ``path``.tmp, then swap it in; on an OSError the previous
    ``path`` stays as it was and a SaveError says what failed."""
    tmp = _fresh(path)
    try:
        write(tmp)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        previous = "the previous one is intact" if os.path.isdir(path) else "there was none before"
        raise SaveError(
            f"could not write the checkpoint {path}: {e.strerror or e} "
            f"({getattr(e, 'filename', None) or 'while saving'}); {previous}. Free some space "
            "(or fix the permissions) and run the same command with --resume"
        ) from None
    _swap_in(tmp, path)


def _swap_in(tmp: str, final: str) -> None:
    """Replace ``final`` by ``tmp`` with two renames; a process killed in between leaves
    ``final``.old, which ``recover`` renames back."""
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


def save_model(path: str, model, pipeline, labels: list[str], task_name: str, run: dict, parallel=None) -> None:
    """A self-contained model directory that ``load_model`` and PaddleNLP both read.

    Every rank calls it (a tensor-parallel model's weights are gathered); the main one writes.
    """
    state = parallel.full_state(model.state_dict()) if parallel is not None else model.state_dict()
    if parallel is not None and not parallel.is_main:
        return

    def write(tmp):
        model.save_pretrained(tmp, state_dict=state, safe_serialization=True)
        pipeline.save(tmp)
        with open(os.path.join(tmp, "labels.json"), "w", encoding="utf-8") as f:
            json.dump(labels, f, ensure_ascii=False, indent=1)
        write_run_file(tmp, task_name, run)

    write_atomically(path, write)


def write_run_file(path: str, task_name: str, run: dict) -> None:
    """``ernie_ft.yaml`` in the model directory ``path``: the task, recorded so that it loads from any directory
    (``task.recorded_spec``), and the run config."""
    with open(os.path.join(path, RUN_FILE), "w", encoding="utf-8") as f:
        yaml.safe_dump({"task": recorded_spec(task_name), "run": run}, f, allow_unicode=True, sort_keys=False)


def resumed_rules(output: str, parallel=None) -> str | None:
    """The tokenization rules of the run in ``output`` being resumed, as its best/ model recorded them ("ernie_ft" when
    it records none: saved before there were rules); None when it has no best/ model yet. With ``parallel``, as rank
    0 reads them (``Parallel.from_main``): every rank tokenizes alike."""

    def read() -> str | None:
        meta = os.path.join(output, BEST, "ernie_ft_text.json")
        if not os.path.isfile(meta):
            return None
        with open(meta, encoding="utf-8") as f:
            return json.load(f).get("rules", "ernie_ft")

    return parallel.from_main(read) if parallel is not None else read()


def load_weights(path: str, model, parallel=None) -> None:
    """Load the safetensors weights of a model directory written by ``save_model`` into ``model``
    (laid out like its parameters on a mesh). With ``parallel``, call on every rank: rank 0 reads them and the others
    receive them (``Parallel.from_main``), so a node that cannot read rank 0's output directory still gets them."""
    import paddle
    from safetensors.numpy import load_file

    def read() -> dict:
        return load_file(os.path.join(path, SAFE_WEIGHTS))

    arrays = parallel.from_main(read) if parallel is not None else read()
    state = {name: paddle.to_tensor(value) for name, value in arrays.items()}
    model.set_state_dict(parallel.shard_like(state, model) if parallel is not None else state)


@dataclass
class Loaded:
    model: Any
    pipeline: Any
    labels: list
    task: Any
    run: dict
    directory: str = ""
    """The checkpoint directory it was read from (``resolve_model_dir``'s answer)."""
    source: ModelDir | None = None
    """What was read of that directory (``read_model_dir``), for whoever needs more of it (its kind, export files)."""


def resolve_model_dir(path: str) -> str:
    """Accept the run's output directory as well as its best/ checkpoint."""
    return checkpoint_dir(path).path


def checkpoint_dir(model: str | ModelDir, flag: str = "--model") -> ModelDir:
    """``model`` read once (``read_model_dir``; a ``ModelDir`` is taken as it is) when ernie_ft can predict with it:
    an ernie_ft checkpoint (a run, its ``best/``, an export) or a transformers checkpoint; else a UserError."""
    found = as_model_dir(model, flag)
    if found.run is None and found.hf_config is None:
        raise UserError(
            f"{flag} {found.given}: not an ernie_ft checkpoint (no {RUN_FILE}); "
            "pass the output directory of a training run or its best/ folder"
        )
    return found


def load_model(
    path: str | ModelDir, weights: bool = True, trust_pickle: bool = False, task: str | None = None
) -> Loaded:
    """Model, text pipeline, labels, task and run config of a saved checkpoint, ready to predict.

    ``path``: a checkpoint directory or a run's output directory (``resolve_model_dir``), or one already read (a
    ``ModelDir``: nothing in it is read again). ``weights=False`` skips the dygraph model (for an exported one),
    unless the task binds it (``binds_model``: then the saved arrays where it takes them, ``binds_saved_arrays``).
    Weights are read from safetensors; a pickle only with ``trust_pickle`` (see ``weights_format``). ``task``: a task
    spec given by the user (``--task``) that replaces the one the checkpoint recorded (see ``checkpoint_task``).
    """
    from ernie_ft.models.modeling import model_class

    source = checkpoint_dir(path)
    if source.run is None:
        return _load_transformers(source, weights, task)
    if source.labels is None:
        raise UserError(f"--model {source.given}: no {LABELS_FILE} beside {RUN_FILE}; save the checkpoint again")
    meta, path = source.run, source.path
    task = recorded_task(meta, path, task)
    model = None
    if task.binds_model and task.binds_saved_arrays and not weights:  # an engine runs the model: the task reads the
        model = SavedArrays(path)  # saved weights it needs, without Paddle
    elif weights or task.binds_model:
        model = from_pretrained(model_class(task.head, task.model_class), path, trust_pickle, files=source.files)
        model.eval()
    if model is not None and task.binds_model:
        task.bind(model)
    return Loaded(model, source.pipeline(), source.labels, task, meta["run"], path, source)


def recorded_task(meta: dict, path: str, given: str | None = None):
    """The task of the checkpoint ``path`` whose run file is ``meta``, with the options it recorded as this version
    names them (``TaskHooks.recorded_options``); ``given``: a ``--task`` spec instead of the recorded one (see
    ``checkpoint_task``: no code inside the checkpoint is run)."""
    spec = checkpoint_task(meta["task"], path, given)
    cls = resolve_task(spec)
    options = meta["run"].get("task") or {}
    return create_task(cls, cls.recorded_options(options, meta["run"]) if isinstance(cls, type) else options, spec)


TASK_OF_HEAD = {"sequence": "classify", "token": "ner", "span": "qa"}
"""The built-in task that answers with a transformers checkpoint's head (``hf.head_of``)."""


def _load_transformers(source: ModelDir, weights: bool, task: str | None) -> Loaded:
    """``load_model`` for a transformers checkpoint with a task head: the task its architecture names, the labels of
    its ``id2label``, its tokenizer's rules; the run's settings are the defaults, texts cut to at most 512 tokens."""
    from ernie_ft.models.modeling import model_class

    path, config, head = source.path, source.hf_config, source.head
    if head not in TASK_OF_HEAD:
        architecture = (config.get("architectures") or ["no architecture"])[0]
        raise UserError(
            f"--model {path}: a transformers checkpoint without a task head ({architecture}); fine-tune it first, "
            f"e.g. python -m ernie_ft.classify --model {path} --train FILE --output RUN"
        )
    hf.check_weights(path, config, files=source.files)
    multi = head == "sequence" and not task and hf.is_multi_label(config)  # problem_type: a sigmoid per label
    loaded_task = load_task(task or TASK_OF_HEAD[head], {"multi_label": True} if multi else None)
    if loaded_task.head != head:
        raise UserError(f"--task {task}: its head is {loaded_task.head!r}, but --model {path} has a {head!r} head")
    model = None
    if weights or loaded_task.binds_model:
        model, _ = hf.load(model_class(head, loaded_task.model_class), path, head, source=source)
        model.eval()
        loaded_task.bind(model)
    run = {"data": {"max_len": min(512, int(config.get("max_position_embeddings", 512)))}}
    return Loaded(model, source.pipeline(), source.labels, loaded_task, run, path, source)


def checkpoint_task(recorded: str, path: str, given: str | None = None) -> str:
    """The task spec to load the checkpoint ``path`` with: ``given`` (``--task``, the user's own choice) when
    there is one, else the ``recorded`` one, whose code must be found outside the checkpoint.

    Code that lies inside a checkpoint (or its run's directory) is never imported on its own: a shared
    checkpoint must not run code, as with pickled weights. A relative file spec (written by ernie_ft 0.2 and
    earlier) is found from the working directory, so old checkpoints load from where they were trained.
    """
    if given or recorded in BUILTIN:
        return given or recorded
    module_name = recorded.partition(":")[0]
    source = task_source(recorded)
    if source is None and module_name.endswith(".py"):
        where = "" if os.path.isabs(module_name) else f" relative to {os.getcwd()}"
        raise UserError(
            f"--model {path}: the task it was trained with, {recorded}, is not found (there is no {module_name}"
            f"{where}); pass --task path/to/file.py:Class"
        )
    if source is None:
        raise UserError(
            f"--model {path}: the task it was trained with, {recorded}, cannot be imported here ({module_name} "
            "not found); pass --task path/to/file.py:Class"
        )
    own = [os.path.realpath(path)]
    if os.path.basename(os.path.normpath(path)) == BEST:
        own.append(os.path.dirname(own[0]))
    real = os.path.realpath(source)
    if any(os.path.commonpath([real, folder]) == folder for folder in own):
        spec = f"{source}:{recorded.partition(':')[2]}" if source.endswith(".py") else recorded
        raise UserError(
            f"--model {path}: its task {recorded} is code inside the checkpoint ({source}), which ernie_ft does not "
            f"run on its own: a shared checkpoint must not run code (as with pickled weights). If you trust it, "
            f"name it yourself: --task {spec}"
        )
    return recorded

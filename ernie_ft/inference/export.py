"""Export a trained model for deployment: ``python -m ernie_ft export --model DIR --output DIR [--format onnx]``.

The output directory is the checkpoint (tokenizer, labels, task and run config, dygraph
weights) plus a static graph saved with ``paddle.jit.save`` (``inference.json`` or
``inference.pdmodel``, and ``inference.pdiparams``) whose inputs have dynamic batch size and
length, and with ``--format onnx`` the same graph as ``model.onnx`` (``inference.onnx``). ``predict --model
OUTPUT`` runs it with ONNX Runtime or Paddle Inference (``static_graph``; ``--engine auto``, the default).
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from typing import TYPE_CHECKING

from ernie_ft.errors import UserError
from ernie_ft.inference import FORMATS
from ernie_ft.inference.libraries import LOG, check_dependencies
from ernie_ft.inference.static_graph import PREFIX, InferenceModel, graph_file

if TYPE_CHECKING:
    from ernie_ft.models.model_dir import ModelDir

__all__ = ["PREFIX", "InferenceModel", "calibration_batches", "check_calibration", "export", "graph_file"]


def export(
    model_dir: str | ModelDir,
    output: str,
    overwrite: bool = False,
    trust_pickle: bool = False,
    task: str | None = None,
    format: str = "paddle",
    quantize: str | None = None,
    calibration: str | None = None,
    verbose: bool = False,
) -> str:
    """Write the static model beside a copy of the checkpoint ``model_dir`` (a checkpoint or a run's directory, or a
    ``ModelDir`` already read; its weights as safetensors, whatever the source held); returns the output directory.

    ``task``: a task spec that replaces the one the checkpoint recorded; the export records it instead.
    ``format`` 'onnx' also writes ``model.onnx`` for ONNX Runtime (``inference.onnx``), and with ``quantize`` (a
    ``--quantize`` value, ``int8.parse``) ``model.int8.onnx`` instead, in a directory holding only what the int8
    engine reads (``slim``); static quantization calibrates on the texts of ``calibration`` (a file the task reads),
    by default on the run's training file. What the libraries print while the graph is converted goes to
    ``export.log`` in the output (``libraries.LOG``), or with ``verbose`` to the terminal; the caller's process is left
    as it was (``libraries``: no descriptor, environment or logging level changed).
    """
    choice = _check_options(format, quantize, calibration)
    static = choice is not None and choice.method == "static"
    import paddle

    from ernie_ft.inference import libraries, onnx
    from ernie_ft.models.weights import PICKLE_WEIGHTS, SAFE_WEIGHTS
    from ernie_ft.training.checkpoint import checkpoint_dir, load_model, write_run_file

    found = checkpoint_dir(model_dir)  # the directory's one reading
    source, model_dir = found.path, found.given
    if os.path.abspath(output) == os.path.abspath(source):
        raise UserError("--output must differ from --model (the export copies the checkpoint)")
    if os.path.exists(output) and os.listdir(output) and not overwrite:
        raise UserError(f"--output {output} already holds files; pass --overwrite or choose another directory")
    loaded = load_model(found, trust_pickle=trust_pickle, task=task)
    if format == "hf":
        from ernie_ft.inference.hf_export import export_hf

        export_hf(loaded, output, model_dir)
        return output
    if loaded.task.head == "mlm":  # its graph would need the masked positions as an input
        raise UserError(
            f"--model {model_dir}: a pretraining (fill-mask) checkpoint is not exported; serve or "
            "predict with it as it is (dygraph), or fine-tune it and export the task model"
        )
    batches, sample = calibration_batches(loaded, calibration) if static else (None, None)
    spec = [paddle.static.InputSpec([None, None], "int64", name) for name in ("input_ids", "token_type_ids")]
    tmp = output.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    log = None if verbose else os.path.join(tmp, libraries.LOG)
    try:
        shutil.copytree(source, tmp, ignore=shutil.ignore_patterns(PICKLE_WEIGHTS, onnx.MANIFEST, "*.onnx", *OWN))
        if SAFE_WEIGHTS not in found.files:  # a trusted pickle becomes safetensors
            loaded.model.save_pretrained(tmp, safe_serialization=True)
        if task:  # the export runs with the task the user named
            write_run_file(tmp, task, loaded.run)
        with warnings.catch_warnings():  # the code Paddle generates for each traced forward adds a global filter
            static = paddle.jit.to_static(loaded.model, input_spec=spec, full_graph=True)
            paddle.jit.save(static, os.path.join(tmp, PREFIX))
        manifest = _to_onnx(tmp, loaded, choice, batches, sample, log) if format == "onnx" else None
        if manifest:
            print(onnx.describe(manifest))
        if choice:
            slim(tmp, loaded.task.binds_model)
    except BaseException as error:
        _keep_log(log, output, error)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(output, ignore_errors=True)
    os.rename(tmp, output)
    return output


def _to_onnx(directory: str, loaded, choice, batches, sample, log: str | None) -> dict:
    """``onnx.convert`` of the graph just saved in ``directory``, the libraries' messages to ``log``; its manifest."""
    from ernie_ft.inference import onnx
    from ernie_ft.models.weights import SAFE_WEIGHTS

    config = loaded.model.config
    return onnx.convert(
        directory,
        graph_file(directory),
        os.path.join(directory, f"{PREFIX}.pdiparams"),
        os.path.join(directory, SAFE_WEIGHTS),
        config.num_attention_heads,
        config.hidden_size,
        loaded.pipeline.pad_id,
        choice,
        batches,
        sample,
        log,
    )


OWN = (LOG, "eval-*")
"""What an export holds of its own that exporting it again does not copy: the libraries' log and evaluations."""


def _keep_log(log: str | None, output: str, error: BaseException) -> None:
    """After a failed export (not a user error), the libraries' log beside ``output``, where the user is told."""
    if log is None or isinstance(error, UserError) or not os.path.isfile(log) or not os.path.getsize(log):
        return
    kept = output.rstrip("/") + "-" + os.path.basename(log)
    shutil.move(log, kept)
    print(f"the libraries' messages during the failed export: {kept}", file=sys.stderr)


CALIBRATION_WINDOWS = 256
CALIBRATION_BATCH = 16


def slim(directory: str, keeps_weights: bool) -> None:
    """Remove from an int8 export what its engine does not read: the Paddle graph and its parameters, and the dygraph
    weights unless the task binds the model (``binds_model``: a CRF's transitions are read from them)."""
    from ernie_ft.models.weights import SAFE_WEIGHTS

    for name in (f"{PREFIX}.json", f"{PREFIX}.pdmodel", f"{PREFIX}.pdiparams", f"{PREFIX}.pdiparams.info"):
        if os.path.isfile(os.path.join(directory, name)):
            os.remove(os.path.join(directory, name))
    if not keeps_weights and os.path.isfile(os.path.join(directory, SAFE_WEIGHTS)):
        os.remove(os.path.join(directory, SAFE_WEIGHTS))


def _check_options(format: str, quantize: str | None, calibration: str | None):
    """Refuse flags that do not go together; the ``int8.Choice`` of ``quantize`` (None without it)."""
    from ernie_ft.inference import int8

    if format not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, not {format!r}")
    if format == "onnx":
        check_dependencies(quantize)
    choice = int8.parse(quantize)
    if choice is not None and format != "onnx":
        raise UserError("--quantize makes an int8 ONNX model: add --format onnx")
    if calibration is not None and (choice is None or choice.method != "static"):
        add = "add --quantize int8" if choice is None else f"--quantize {quantize} has no calibration"
        raise UserError(f"--calibrate is for static quantization: {add}")
    if calibration is not None:
        check_calibration(calibration)
    return choice


def check_calibration(path: str) -> None:
    """Refuse a ``--calibrate`` file that is missing, a directory, unreadable or empty, before anything is loaded or
    written (``export``, ``serve --export int8``); what it holds, the task's reader judges."""
    where = f"--calibrate {path}"
    if not os.path.exists(path):
        raise UserError(f"{where}: no such file (relative paths start at {os.getcwd()})")
    if os.path.isdir(path):
        raise UserError(f"{where}: a directory; name a file of texts in it")
    try:
        with open(path, "rb") as f:
            empty = not f.read(1)
    except OSError as e:
        raise UserError(f"{where}: cannot be read ({e.strerror})") from None
    if empty:
        raise UserError(f"{where}: empty; it needs texts to calibrate on (a few hundred, in any format the task reads)")


def calibration_batches(loaded, path: str | None) -> tuple[list[dict], str]:
    """(Batches of model inputs for static quantization, where their texts came from): up to
    ``CALIBRATION_WINDOWS`` windows drawn at random (seed 0) from ``path``, else from the run's training file."""
    import random

    from paddlenlp.data import Pad

    from ernie_ft.inference.predict import inference_data

    if path is None:
        path = loaded.run.get("data", {}).get("train")
        if not path or not os.path.isfile(path):
            raise UserError(
                f"static int8 calibrates on the run's training texts, and {path or 'its training file'} is not "
                "there: pass --calibrate FILE (a few hundred texts in any format the task reads), or quantize "
                "dynamically: export --quantize int8-dynamic (no calibration; a text's answer depends on its batch)"
            )
    data = inference_data(loaded.run["data"], {}, loaded.task)
    examples = loaded.task.read(path, data, "--calibrate", labelled=False)
    encodings = loaded.pipeline.encode_many(loaded.task.texts(examples), word_ids=False)
    features = loaded.task.featurize(examples, encodings, loaded.pipeline, loaded.labels, data)
    if not features:
        raise UserError(f"--calibrate {path}: no model input could be built from it")
    chosen = random.Random(0).sample(features, min(CALIBRATION_WINDOWS, len(features)))
    chosen.sort(key=lambda f: len(f["input_ids"]))
    batches = []
    for start in range(0, len(chosen), CALIBRATION_BATCH):
        part = chosen[start : start + CALIBRATION_BATCH]
        batches.append(
            {
                "input_ids": Pad(pad_val=loaded.pipeline.pad_id, dtype="int64")([f["input_ids"] for f in part]),
                "token_type_ids": Pad(pad_val=0, dtype="int64")([f["token_type_ids"] for f in part]),
            }
        )
    return batches, f"{len(chosen)} windows of {os.path.basename(path)}"

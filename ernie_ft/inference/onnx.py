"""The task model as ONNX, run by ONNX Runtime: ``python -m ernie_ft export --format onnx [--quantize int8]``,
``--engine onnxruntime`` / ``onnxruntime-int8``.

paddle2onnx (a PaddleNLP dependency) converts the static graph that ``export`` saves (Paddle 3's PIR
``inference.json``) into ONNX with dynamic batch size and length; ONNX Runtime's transformer optimizer fuses
what it recognises (embeddings + LayerNorm, residual + LayerNorm, bias + GELU) into ``model.onnx``, which gives
the dygraph model's logits (classification to 1.2e-7 on the nano shape). ``--quantize`` adds
``model.int8.onnx``: weights int8, activations quantized per batch (dynamic) or with ranges calibrated on
training texts (static). Weights use 7 of the 8 bits (``reduce_range``): the uint8 x int8 products of CPUs without
VNNI saturate in 16-bit sums otherwise, which took a QA model's outputs 35 % off fp32's where 7 bits keep them
within 2.2 %. Whatever the task does with the outputs (pooling windows, CRF decoding, spans) runs
as for the other engines.

``onnx.json`` records the hash of each ONNX file and of the weights it was made from: an ONNX file that does
not belong to the checkpoint beside it is refused instead of answering for another model.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Iterable

from ernie_ft.errors import UserError

ONNX_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
MANIFEST = "onnx.json"
OPSET = 14
INSTALL = "pip install onnxruntime"
QUANTIZATIONS = ("int8", "int8-dynamic", "int8-static")
"""``--quantize`` values: 'int8' is ``DEFAULT_INT8``'s method."""
DEFAULT_INT8 = "int8-dynamic"
"""Dynamic int8 by default: within 0.1 point of fp32's accuracy where static calibration lost more for little
speed on these CPUs (docs/deployment.md has the table)."""
FILES = {"fp32": ONNX_FILE, "int8": INT8_FILE}


def onnx_file(directory: str, precision: str = "fp32") -> str | None:
    """The ONNX model of ``precision`` ('fp32' or 'int8') in ``directory``, or None."""
    path = os.path.join(directory, FILES[precision])
    return path if os.path.isfile(path) else None


def _import_onnxruntime(flag: str):
    try:
        import onnxruntime
    except ImportError:
        raise UserError(f"{flag} needs ONNX Runtime: {INSTALL}") from None
    return onnxruntime


def sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def convert(
    directory: str,
    graph: str,
    params: str,
    weights: str,
    heads: int,
    hidden: int,
    quantize: str | None = None,
    calibration: Iterable[dict] | None = None,
    calibration_source: str | None = None,
) -> dict:
    """Write ``directory``/model.onnx (and with ``quantize`` model.int8.onnx) from the exported Paddle graph
    ``graph`` and its ``params``, and ``onnx.json``; returns what ``onnx.json`` records.

    ``weights``: the checkpoint's weights file, whose hash the manifest records. ``heads``, ``hidden``: the
    encoder's shape, for the optimizer's attention patterns. ``calibration``: batches of model inputs (numpy) for
    static quantization, read from ``calibration_source``.
    """
    try:
        import paddle2onnx
    except ImportError:
        raise UserError("--format onnx needs paddle2onnx: pip install paddle2onnx") from None
    _import_onnxruntime("--format onnx")
    from onnxruntime.transformers import optimizer

    # paddle2onnx's graph optimiser (polygraphy) would otherwise pip-install packages while it runs
    os.environ.setdefault("POLYGRAPHY_AUTOINSTALL_DEPS", "0")
    path = os.path.join(directory, ONNX_FILE)
    raw = path + ".raw"
    paddle2onnx.export(graph, params, save_file=raw, opset_version=OPSET, enable_onnx_checker=True)
    # Python fusions only (opt_level 0): the session applies ONNX Runtime's own graph optimisations when it loads
    optimized = optimizer.optimize_model(raw, model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0)
    optimized.save_model_to_file(path)
    os.remove(raw)
    fused = {name: count for name, count in optimized.get_fused_operator_statistics().items() if count}
    manifest = {"weights_sha256": sha256(weights), "fusions": fused, "files": {ONNX_FILE: {"precision": "fp32"}}}
    if quantize:
        method = (DEFAULT_INT8 if quantize == "int8" else quantize).split("-")[1]
        int8 = os.path.join(directory, INT8_FILE)
        if method == "static":
            _quantize_static(path, int8, calibration)
        else:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            with _quiet():
                quantize_dynamic(path, int8, weight_type=QuantType.QInt8, reduce_range=True)
        manifest["files"][INT8_FILE] = {"precision": "int8", "method": method}
        if method == "static":
            manifest["files"][INT8_FILE]["calibration"] = calibration_source
    for name, entry in manifest["files"].items():
        entry["sha256"] = sha256(os.path.join(directory, name))
    with open(os.path.join(directory, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
    return manifest


def _quantize_static(source: str, target: str, calibration: Iterable[dict]) -> None:
    """Weights int8 per channel, activations uint8 with ranges from the ``calibration`` batches (QDQ format), in the
    products of an activation and a weight (attention's products of two activations stay fp32)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Batches(CalibrationDataReader):
        def __init__(self):
            self.batches = iter(calibration)

        def get_next(self):
            return next(self.batches, None)

    with _quiet():
        quantize_static(
            source,
            target,
            Batches(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            reduce_range=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            extra_options={"MatMulConstBOnly": True},
        )


@contextlib.contextmanager
def _quiet():
    """ONNX Runtime's quantizer logs advice (pre-processing, skipped tensors) as warnings of the root logger."""
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def describe(manifest: dict) -> str:
    """One line on what ``convert`` wrote: the fusions that applied and the int8 method."""
    fused = ", ".join(f"{name} x{count}" for name, count in manifest["fusions"].items()) or "none"
    line = f"ONNX Runtime fusions: {fused}"
    int8 = manifest["files"].get(INT8_FILE)
    if int8:
        line += f"; {INT8_FILE}: int8, {int8['method']} quantization"
        if int8.get("calibration"):
            line += f" calibrated on {int8['calibration']}"
    return line


def check_belongs(directory: str, precision: str) -> str:
    """The path of ``directory``'s ONNX model of ``precision`` after checking that export wrote it for the weights
    beside it (``onnx.json``'s hashes); UserError otherwise."""
    from ernie_ft.models.weights import SAFE_WEIGHTS

    name = FILES[precision]
    path = onnx_file(directory, precision)
    engine = "onnxruntime" if precision == "fp32" else "onnxruntime-int8"
    redo = "python -m ernie_ft export --model CHECKPOINT --output DIR --format onnx"
    redo += " --quantize int8" if precision == "int8" else ""
    if path is None:
        raise UserError(f"--model {directory}: no {name} for --engine {engine}; create it with {redo}")
    try:
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
        recorded = manifest["files"][name]["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"--model {directory}: {name} has no record in {MANIFEST}; export it again: {redo}") from None
    weights = os.path.join(directory, SAFE_WEIGHTS)
    if sha256(path) != recorded or (os.path.isfile(weights) and sha256(weights) != manifest.get("weights_sha256")):
        raise UserError(
            f"--model {directory}: {name} does not belong to the checkpoint beside it (its hash differs from the "
            f"one export recorded in {MANIFEST}); export the checkpoint again: {redo}"
        )
    return path


class OnnxModel:
    """An ONNX Runtime session that the prediction code calls like the dygraph model."""

    training = False

    def __init__(self, directory: str, precision: str = "fp32", threads: int = 0):
        engine = "onnxruntime" if precision == "fp32" else "onnxruntime-int8"
        onnxruntime = _import_onnxruntime(f"--engine {engine}")
        path = check_belongs(directory, precision)
        from ernie_ft.training.runtime import available_cores

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or available_cores()
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def eval(self):
        return self

    def train(self, mode: bool = True):
        return self

    def __call__(self, input_ids, token_type_ids, position_ids=None):
        import paddle

        feed = {"input_ids": input_ids.numpy(), "token_type_ids": token_type_ids.numpy()}
        outputs = [paddle.to_tensor(o) for o in self.session.run(None, {k: feed[k] for k in self.inputs})]
        return outputs[0] if len(outputs) == 1 else outputs

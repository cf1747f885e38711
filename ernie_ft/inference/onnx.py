"""The task model as ONNX, run by ONNX Runtime: ``python -m ernie_ft export --format onnx [--quantize int8]``,
``--engine onnxruntime`` / ``onnxruntime-int8``.

paddle2onnx (a PaddleNLP dependency) converts the static graph that ``export`` saves (Paddle 3's PIR
``inference.json``) into ONNX with dynamic batch size and length; ONNX Runtime's transformer optimizer fuses
what it recognises (embeddings + LayerNorm, residual + LayerNorm, bias + GELU), and ``fuse_attention`` each
layer's attention, into ``model.onnx``, which gives the dygraph model's logits (classification to 1.2e-7 on the
nano shape). ``--quantize`` writes
``model.int8.onnx`` instead: weights int8, activations quantized per batch (dynamic) or with ranges calibrated on
training texts (static), chosen for the CPU that will run it (``int8``: the bits, which products, the attention).
Whatever the task does with the outputs (pooling windows, CRF decoding, spans) runs as for the other engines.

``onnx.json`` records the hash of each ONNX file and of the weights it was made from: an ONNX file that does
not belong to the checkpoint beside it is refused instead of answering for another model.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ernie_ft.errors import UserError

if TYPE_CHECKING:
    from ernie_ft.inference.int8 import Choice

ONNX_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
MANIFEST = "onnx.json"
OPSET = 14
INSTALL = "pip install onnxruntime"
FILES = {"fp32": ONNX_FILE, "int8": INT8_FILE}
ENGINE = {"fp32": "onnxruntime", "int8": "onnxruntime-int8"}
"""The ``--engine`` that runs each precision's file."""


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
    pad_id: int,
    quantize: Choice | None = None,
    calibration: Iterable[dict] | None = None,
    calibration_source: str | None = None,
    log: str | None = None,
) -> dict:
    """Write ``directory``/model.onnx (and with ``quantize`` model.int8.onnx) from the exported Paddle graph
    ``graph`` and its ``params``, and ``onnx.json``; returns what ``onnx.json`` records.

    ``weights``: the checkpoint's weights file, whose hash the manifest records. ``heads``, ``hidden``: the
    encoder's shape, for the optimizer's patterns; ``pad_id``: the padding token, which attention masks.
    ``quantize``: how to write ``model.int8.onnx`` (``int8.parse``); ``calibration``: batches of model inputs
    (numpy) for static quantization, read from ``calibration_source``. ``log``: the file that takes what the
    libraries print and log (``libraries.paddle_to_onnx``, ``libraries.logs_to_file``); None: where they print it.
    """
    from ernie_ft.inference.libraries import check_dependencies, logs_to_file, paddle_to_onnx

    check_dependencies(quantize)
    path = os.path.join(directory, ONNX_FILE)
    raw = path + ".raw"
    paddle_to_onnx(graph, params, raw, OPSET, log)
    with logs_to_file(log):
        return _optimize(directory, raw, weights, heads, hidden, pad_id, quantize, calibration, calibration_source)


def _optimize(directory, raw, weights, heads, hidden, pad_id, quantize, calibration, calibration_source) -> dict:
    """``convert`` from paddle2onnx's graph ``raw`` on: ONNX Runtime's fusions, ours, the int8 model and the
    manifest."""
    from onnxruntime.transformers import optimizer

    from ernie_ft.inference.onnx_graph import split_layer_norms

    path = os.path.join(directory, ONNX_FILE)
    # Python fusions only (opt_level 0): the session applies ONNX Runtime's own graph optimisations when it loads
    optimized = optimizer.optimize_model(raw, model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0)
    fused = {name: count for name, count in optimized.get_fused_operator_statistics().items() if count}
    split = split_layer_norms(optimized.model) if quantize else {}  # the int8 graph: the CPU's faster kernels
    unfused = path + ".unfused"
    if quantize and quantize.attention:  # int8 products in the attention: quantized from the graph before fusing it
        optimized.save_model_to_file(unfused)
    fused["MultiHeadAttention"] = fuse_attention(optimized.model, heads, pad_id)
    optimized.prune_graph()
    optimized.save_model_to_file(path)
    os.remove(raw)
    manifest = {"weights_sha256": sha256(weights), "fusions": fused, "files": {ONNX_FILE: {"precision": "fp32"}}}
    if quantize:  # the int8 model replaces the fp32 one: an export holds what its engine reads
        from ernie_ft.inference.int8 import quantize as write_int8

        write_int8(quantize, path, unfused, os.path.join(directory, INT8_FILE), calibration)
        for name in (path, unfused):
            if os.path.exists(name):
                os.remove(name)
        entry = {"precision": "int8", "method": quantize.method, "quantization": quantize.record()}
        if quantize.attention:  # the int8 model was quantized from the graph before this fusion
            fused.pop("MultiHeadAttention")
        if quantize.method == "static":
            entry["calibration"] = calibration_source
        entry["split"] = {name: count for name, count in split.items() if count}
        manifest["files"] = {INT8_FILE: entry}
    for name, entry in manifest["files"].items():
        entry["sha256"] = sha256(os.path.join(directory, name))
    with open(os.path.join(directory, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
    return manifest


def fuse_attention(model, heads: int, pad_id: int) -> int:
    """Replace each layer's attention, as paddle2onnx writes ERNIE's, by one ``MultiHeadAttention`` (ONNX Runtime's
    contrib operator, with the padding mask computed once from ``input_ids``); returns how many were replaced.

    ONNX Runtime's optimizer does not match paddle2onnx's pattern (the query is scaled, then a zero is added, and
    the mask comes from ``input_ids == pad``). The pattern, from the softmax up::

        q: Add(bias) -> Reshape -> Transpose -> Mul(scale) -> Add(0) -+
        k: Add(bias) -> Reshape -> Transpose -> Transpose ------------+-> MatMul -> Add(mask) -> Softmax
        v: Add(bias) -> Reshape -> Transpose -> MatMul(probs, v) -> Transpose -> Reshape: the attention's output

    A layer that differs anywhere is left as it is. Outputs are unchanged (equal to the last bit on the nano
    shape).
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    mask = "ernie_ft.key_padding_mask"
    layers = [match for node in graph.node if node.op_type == "Softmax" for match in [_attention_layer(graph, node)]]
    layers = [match for match in layers if match is not None]
    for n, (inputs, output, scale, nodes) in enumerate(layers):
        attention = helper.make_node(
            "MultiHeadAttention",
            [*inputs, "", mask],
            [output.output[0]],
            name=f"ernie_ft.MultiHeadAttention.{n}",
            domain="com.microsoft",
            num_heads=heads,
            scale=scale,
        )
        graph.node.insert(list(graph.node).index(output), attention)
        for node in nodes:
            graph.node.remove(node)
    if not layers:
        return 0
    graph.initializer.append(numpy_helper.from_array(np.array(pad_id, dtype=np.int64), "ernie_ft.pad_id"))
    graph.node.insert(0, helper.make_node("Cast", ["ernie_ft.not_pad"], [mask], to=TensorProto.INT32))
    graph.node.insert(0, helper.make_node("Not", ["ernie_ft.is_pad"], ["ernie_ft.not_pad"]))
    graph.node.insert(0, helper.make_node("Equal", ["input_ids", "ernie_ft.pad_id"], ["ernie_ft.is_pad"]))
    if not any(opset.domain == "com.microsoft" for opset in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return len(layers)


def _attention_layer(graph, softmax):
    """``fuse_attention``'s pattern around ``softmax``: (the query, key and value projections' outputs, the node
    whose output is the attention's, the query's scale, every node the fused operator replaces), or None."""
    import numpy as np
    from onnx import numpy_helper

    producer = {out: node for node in graph.node for out in node.output}
    initializers = {i.name: i for i in graph.initializer}

    def constant(name):
        if name in initializers:
            return numpy_helper.to_array(initializers[name])
        node = producer.get(name)
        return numpy_helper.to_array(node.attribute[0].t) if node is not None and node.op_type == "Constant" else None

    def chain(name, *ops):
        """The nodes producing ``name`` through ``ops`` (each node's first input leads on), or None."""
        nodes = []
        for op in ops:
            node = producer.get(name)
            if node is None or node.op_type != op:
                return None
            nodes.append(node)
            name = node.input[0]
        return nodes

    def only_reader(name, op):
        nodes = [node for node in graph.node if name in node.input]
        return nodes[0] if len(nodes) == 1 and nodes[0].op_type == op else None

    masked = chain(softmax.input[0], "Add", "MatMul")
    if masked is None:
        return None
    q = chain(masked[1].input[0], "Add", "Mul", "Transpose", "Reshape", "Add")
    k = chain(masked[1].input[1], "Transpose", "Transpose", "Reshape", "Add")
    weighted = only_reader(softmax.output[0], "MatMul")
    v = weighted and chain(weighted.input[1], "Transpose", "Reshape", "Add")
    merged = weighted and only_reader(weighted.output[0], "Transpose")
    output = merged and only_reader(merged.output[0], "Reshape")
    if not (q and k and v and output):
        return None
    zero, scale = constant(q[0].input[1]), constant(q[1].input[1])
    if zero is None or scale is None or np.any(zero != 0) or scale.size != 1:
        return None
    inputs = [q[4].output[0], k[3].output[0], v[2].output[0]]
    return (
        inputs,
        output,
        float(scale.reshape(-1)[0]),
        [*q[:4], *k[:3], *v[:2], *masked, softmax, weighted, merged, output],
    )


def describe(manifest: dict) -> str:
    """One line on what ``convert`` wrote: the fusions that applied and how the int8 model was quantized."""
    fused = ", ".join(f"{name} x{count}" for name, count in manifest["fusions"].items() if count) or "none"
    line = f"ONNX Runtime fusions: {fused}"
    entry = manifest["files"].get(INT8_FILE)
    if entry:
        from ernie_ft.inference.onnx_graph import split_line

        line += f"; {INT8_FILE}: int8, {quantization_line(entry)}{split_line(entry.get('split'))}"
    return line


def quantization_line(entry: dict) -> str:
    """How ``onnx.json``'s ``entry`` for the int8 file says it was quantized (an export of before the targets: the
    method alone)."""
    from ernie_ft.inference.int8 import Choice

    choice, calibration = entry.get("quantization"), entry.get("calibration")
    if choice:
        return Choice(**choice).describe(calibration)
    return f"{entry['method']} quantization" + (f" calibrated on {calibration}" if calibration else "")


def _manifest(directory: str, source=None) -> dict:
    """``directory``'s onnx.json: as ``source`` (a ``model_dir.ModelDir``, which read it) holds it, else read now."""
    if source is not None:
        return source.onnx_manifest or {}
    with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
        return json.load(f)


def quantization(directory: str, source=None) -> dict | None:
    """What ``onnx.json`` in ``directory`` records of its int8 model's quantization (``int8.Choice.record`` and
    ``line``, its description), or None; ``source``: ``directory`` already read (a ``model_dir.ModelDir``)."""
    try:
        entry = _manifest(directory, source)["files"][INT8_FILE]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {**entry.get("quantization", {"method": entry.get("method")}), "line": quantization_line(entry)}


def check_belongs(directory: str, precision: str, source=None) -> str:
    """The path of ``directory``'s ONNX model of ``precision`` after checking that export wrote it for the weights
    beside it (``onnx.json``'s hashes); UserError otherwise. ``source``: as for ``quantization``."""
    from ernie_ft.models.weights import SAFE_WEIGHTS

    name = FILES[precision]
    path = onnx_file(directory, precision)
    engine = ENGINE[precision]
    redo = "python -m ernie_ft export --model CHECKPOINT --output DIR --format onnx"
    redo += " --quantize int8" if precision == "int8" else ""
    if path is None:
        raise UserError(f"--model {directory}: no {name} for --engine {engine}; create it with {redo}")
    try:
        manifest = _manifest(directory, source)
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
    takes_arrays = True
    """numpy arrays in and out (``modeling.compute_logits``): running an export needs no Paddle."""

    def __init__(self, directory: str, precision: str = "fp32", threads: int = 0, source=None):
        onnxruntime = _import_onnxruntime(f"--engine {ENGINE[precision]}")
        path = check_belongs(directory, precision, source)
        from ernie_ft.training.cores import available_cores

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or available_cores()
        options.inter_op_num_threads = 1
        # idle threads block, not spin: beside another busy process 1.5x the documents/s, alone 0.97x (benchmarks.md)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def eval(self):
        return self

    def train(self, mode: bool = True):
        return self

    def __call__(self, input_ids, token_type_ids, position_ids=None):
        feed = {"input_ids": input_ids, "token_type_ids": token_type_ids}
        outputs = self.session.run(None, {k: feed[k] for k in self.inputs})
        return outputs[0] if len(outputs) == 1 else outputs
